#pragma once
// What the MPI checkpoint test programs share: world rank and size, a fresh
// scratch directory per test shared by all ranks, and the message of an
// expected exa::Error. Every helper here is collective where it says so.
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <functional>
#include <string>

#include "core/error.hpp"

namespace exa::test {

inline int world_rank() {
  int r;
  MPI_Comm_rank(MPI_COMM_WORLD, &r);
  return r;
}
inline int world_size() {
  int s;
  MPI_Comm_size(MPI_COMM_WORLD, &s);
  return s;
}

// Collective: a fresh directory shared by all ranks, named after the running
// test, under $EXAMOE_TEST_TMPDIR (or the system's temporary directory /
// `fallback`).
inline std::string scratch_dir(const char* fallback) {
  namespace fs = std::filesystem;
  std::string dir;
  if (world_rank() == 0) {
    const char* base = std::getenv("EXAMOE_TEST_TMPDIR");
    const fs::path b = base ? fs::path(base) : fs::temp_directory_path() / fallback;
    const auto* info = ::testing::UnitTest::GetInstance()->current_test_info();
    const fs::path d = b / (std::string(info->test_suite_name()) + "." + info->name());
    fs::remove_all(d);
    fs::create_directories(d);
    dir = d.string();
  }
  int n = static_cast<int>(dir.size());
  MPI_Bcast(&n, 1, MPI_INT, 0, MPI_COMM_WORLD);
  dir.resize(static_cast<std::size_t>(n));
  MPI_Bcast(dir.data(), n, MPI_CHAR, 0, MPI_COMM_WORLD);
  return dir;
}

// The message of the exa::Error f throws ("" when it does not throw).
// EXAMOE_TEST_SHOW_ERRORS=1 prints them (rank 0), to review their wording.
inline std::string error_of(const std::function<void()>& f) {
  try {
    f();
  } catch (const exa::Error& e) {
    if (std::getenv("EXAMOE_TEST_SHOW_ERRORS") && world_rank() == 0) std::fprintf(stderr, "error: %s\n", e.what());
    return e.what();
  }
  return "";
}

inline bool contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

}  // namespace exa::test
