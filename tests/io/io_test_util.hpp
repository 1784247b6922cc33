#pragma once
// Shared helpers of the data-layer tests: a scratch directory per test
// program, raw file access (to build corrupt files), and the exact text of
// the exa::Error a call throws.
#include <gtest/gtest.h>
#include <unistd.h>

#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "core/error.hpp"

namespace exa::io::test {

// A path in this test program's scratch directory, removed at exit.
inline std::string scratch(const std::string& name) {
  struct Dir {
    std::filesystem::path path =
        std::filesystem::temp_directory_path() / ("examoe_io_test_" + std::to_string(::getpid()));
    Dir() { std::filesystem::create_directories(path); }
    ~Dir() {
      std::error_code ec;
      std::filesystem::remove_all(path, ec);
    }
  };
  static const Dir dir;
  return (dir.path / name).string();
}

inline void write_bytes(const std::string& path, const std::string& bytes) {
  std::ofstream(path, std::ios::binary | std::ios::trunc) << bytes;
}

inline std::string read_bytes(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), std::istreambuf_iterator<char>());
}

// The message of the exa::Error `f` throws, or a marker when it throws none.
template <class F>
std::string error_of(F&& f) {
  try {
    f();
  } catch (const exa::Error& e) {
    return e.what();
  }
  return "(no exa::Error thrown)";
}

}  // namespace exa::io::test
