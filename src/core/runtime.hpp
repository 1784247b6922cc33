#pragma once
// Kokkos lifetime. Construct one KokkosRuntime at the top of main (after
// MPI_Init when MPI is used); it finalizes Kokkos when it goes out of scope.
// Kokkos's own --kokkos-* options (Kokkos Tools, threads, devices) are
// removed from argc/argv, so a driver's parser sees only its own.
namespace exa {

class KokkosRuntime {
 public:
  KokkosRuntime(int& argc, char** argv);
  ~KokkosRuntime();
  KokkosRuntime(const KokkosRuntime&) = delete;
  KokkosRuntime& operator=(const KokkosRuntime&) = delete;
};

}  // namespace exa
