#pragma once
// What this binary was built from and with: the `--version` text.
#include <string>

namespace exa {

std::string version_string();       // "0.1.0"
std::string git_hash();             // short hash or "unknown"
std::string kokkos_version();       // "3.4.1"
std::string kokkos_backends();      // "SERIAL;OPENMP"
std::string default_exec_space();   // name of Kokkos::DefaultExecutionSpace

}  // namespace exa
