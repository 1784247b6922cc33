#pragma once
// Shared by the fuzz targets (libFuzzer) and their replay driver (ctest): a
// scratch directory for inputs the code under test reads as files, and the
// rule that tells a finding from the expected answer to bad input.
//
// Bad input must end in exa::Error with a message. An "internal error"
// (EXA_ASSERT) reached from input, any other exception, a crash or a
// sanitizer report is a finding.
#include <unistd.h>

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <exception>
#include <filesystem>
#include <string>
#include <system_error>
#include <typeinfo>

#include "core/error.hpp"

namespace exa::fuzz {

[[noreturn]] inline void finding(const std::string& what) {
  std::fprintf(stderr, "FUZZ FINDING: %s\n", what.c_str());
  std::fflush(stderr);
  std::abort();
}

// An exa::Error is the right answer unless it is an InternalError (a
// broken invariant).
inline void expect_clean_error(const Error& e) {
  const std::string m = e.what();
  if (m.empty()) finding("exa::Error without a message");
  // By type, not by words: a message may quote the input, and the input
  // may say anything.
  if (dynamic_cast<const InternalError*>(&e)) finding("input reached an invariant check: " + m);
}

// Runs f; exa::Error is checked, every other exception is a finding.
template <class F>
bool run_guarded(const char* what, F&& f) {
  try {
    f();
    return true;
  } catch (const Error& e) {
    expect_clean_error(e);
  } catch (const std::exception& e) {
    finding(std::string(what) + " threw a " + typeid(e).name() + " that is not exa::Error: " + e.what());
  } catch (...) {
    finding(std::string(what) + " threw a non-std exception");
  }
  return false;
}

// A directory private to this process under $TMPDIR (default /tmp),
// removed at exit. The fuzz loop rewrites the same few files in it, so a
// long run leaves nothing behind and a crash at most one directory.
inline const std::string& scratch_dir() {
  static const std::string dir = [] {
    const char* t = std::getenv("TMPDIR");
    std::string tmpl = std::string(t && *t ? t : "/tmp") + "/examoe-fuzz-XXXXXX";
    if (!::mkdtemp(tmpl.data())) finding(std::string("cannot create a scratch directory: ") + std::strerror(errno));
    static const std::string keep = tmpl;
    std::atexit([] {
      std::error_code ec;
      std::filesystem::remove_all(keep, ec);
    });
    return tmpl;
  }();
  return dir;
}

inline void write_file(const std::string& path, const std::uint8_t* data, std::size_t size) {
  std::FILE* f = std::fopen(path.c_str(), "wb");
  if (!f) finding("cannot write " + path + ": " + std::strerror(errno));
  const bool written = size == 0 || std::fwrite(data, 1, size, f) == size;
  if (std::fclose(f) != 0 || !written) finding("cannot write " + path);
}

}  // namespace exa::fuzz
