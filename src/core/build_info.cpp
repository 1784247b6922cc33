#include "core/build_info.hpp"

#include <Kokkos_Core.hpp>
#include <fmt/format.h>

#include "examoe/core/version.hpp"

namespace exa {

std::string version_string() { return EXAMOE_VERSION_STRING; }
std::string git_hash() { return EXAMOE_GIT_HASH; }
std::string kokkos_version() {
  return fmt::format("{}.{}.{}", KOKKOS_VERSION / 10000, KOKKOS_VERSION / 100 % 100, KOKKOS_VERSION % 100);
}
std::string kokkos_backends() { return EXAMOE_KOKKOS_BACKENDS_STRING; }
std::string default_exec_space() { return Kokkos::DefaultExecutionSpace::name(); }

}  // namespace exa
