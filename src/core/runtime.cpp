#include "core/runtime.hpp"

#include <Kokkos_Core.hpp>

namespace exa {

KokkosRuntime::KokkosRuntime(int& argc, char** argv) { Kokkos::initialize(argc, argv); }

KokkosRuntime::~KokkosRuntime() {
  if (Kokkos::is_initialized()) Kokkos::finalize();
}

}  // namespace exa
