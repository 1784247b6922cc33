#include "core/runtime.hpp"

#include "core/memory_ledger.hpp"

#include <Kokkos_Core.hpp>
#include <cstring>
#include <vector>

namespace exa {

KokkosRuntime::KokkosRuntime(int& argc, char** argv) {
  // Kokkos answers --help/-h with its own option list; the driver's help is
  // the one a user asked for, so Kokkos does not see those flags.
  std::vector<char*> args;
  for (int i = 0; i < argc; ++i) {
    if (i > 0 && (std::strcmp(argv[i], "--help") == 0 || std::strcmp(argv[i], "-h") == 0)) continue;
    args.push_back(argv[i]);
  }
  int n = static_cast<int>(args.size());
  args.push_back(nullptr);
  Kokkos::initialize(n, args.data());
  // Every View from here on is counted by category (core/memory_ledger.hpp),
  // unless a Kokkos Tools library owns the callbacks.
  MemoryLedger::install();
  // Kokkos has read its own --kokkos-* options (--kokkos-tools-libs=...,
  // --kokkos-threads=...); the drivers' parsers would reject them as unknown.
  int kept = 0;
  for (int i = 0; i < argc; ++i) {
    if (i == 0 || std::strncmp(argv[i], "--kokkos-", 9) != 0) argv[kept++] = argv[i];
  }
  if (kept < argc) argv[kept] = nullptr;
  argc = kept;
}

KokkosRuntime::~KokkosRuntime() {
  if (Kokkos::is_initialized()) Kokkos::finalize();
}

}  // namespace exa
