# One thread pool per rank (docs/architecture.md, "Performance method").
#
# The gemm wrapper reaches the BLAS through Kokkos Kernels' BLAS TPL. With
# an OpenMP Kokkos, a pthreads OpenBLAS keeps a second pool of threads that
# fights OpenMP's spinning workers for the cores (the step ran 2x slower on
# 2 threads than Serial). OpenBLAS built for OpenMP runs its gemm on
# OpenMP's own threads instead. So in an OpenMP build ExaMoE links that one
# (EXAMOE_OPENMP_BLAS: the library; default Debian's openblas-openmp from
# libopenblas-openmp-dev; OFF keeps the TPL's). Every ExaMoE library and
# program links it, with its directory on the run path, so the process
# loads it first and Kokkos Kernels' own libopenblas.so.0 resolves to it.
# (-L/-l and an explicit -rpath rather than the full path: Debian's
# pthreads variant of the same soname sits in an implicit directory, and
# CMake would warn that it cannot order the run path.)
set(EXAMOE_OPENMP_BLAS "" CACHE STRING
    "OpenMP builds: OpenMP-threaded BLAS library to link (empty: Debian's openblas-openmp; OFF: the TPL's own)")
set(EXAMOE_BLAS_THREADING "the Kokkos Kernels BLAS TPL's")
set(EXAMOE_BLAS_RPATH "")
if("OPENMP" IN_LIST EXAMOE_KOKKOS_BACKENDS AND NOT EXAMOE_OPENMP_BLAS STREQUAL "OFF")
  set(_exa_omp_blas "${EXAMOE_OPENMP_BLAS}")
  if(NOT _exa_omp_blas)
    find_library(EXAMOE_OPENBLAS_OPENMP_LIBRARY NAMES openblas
                 PATHS /usr/lib/${CMAKE_LIBRARY_ARCHITECTURE}/openblas-openmp NO_DEFAULT_PATH)
    set(_exa_omp_blas "${EXAMOE_OPENBLAS_OPENMP_LIBRARY}")
  endif()
  if(_exa_omp_blas)
    get_filename_component(EXAMOE_BLAS_RPATH "${_exa_omp_blas}" DIRECTORY)
    get_filename_component(_exa_omp_blas_name "${_exa_omp_blas}" NAME_WE)
    string(REGEX REPLACE "^lib" "" _exa_omp_blas_name "${_exa_omp_blas_name}")
    # --no-as-needed: ExaMoE's own code calls no BLAS symbol, so the
    # toolchain's default --as-needed would drop the library, and Kokkos
    # Kernels' libopenblas.so.0 (its own run path has no openblas-openmp)
    # would load Debian's pthreads variant after all.
    target_link_libraries(ExaMoE_kokkoskernels INTERFACE "-L${EXAMOE_BLAS_RPATH}" "-Wl,--push-state,--no-as-needed"
                          "-l${_exa_omp_blas_name}" "-Wl,--pop-state")
    target_link_options(ExaMoE_kokkoskernels INTERFACE "LINKER:-rpath,${EXAMOE_BLAS_RPATH}")
    # The benchmarks' cblas baseline must be the same library.
    set(OPENBLAS_LIBRARY ExaMoE::kokkoskernels)
    set(EXAMOE_BLAS_THREADING "OpenMP (${_exa_omp_blas})")
  else()
    set(EXAMOE_BLAS_THREADING "the TPL's: no OpenMP OpenBLAS found, BLAS and OpenMP threads may fight")
    message(WARNING "OpenMP Kokkos without an OpenMP-threaded BLAS: a pthreads OpenBLAS and OpenMP fight for the "
                    "cores. Install Debian's libopenblas-openmp-dev (scripts/setup.sh openmp does) or point "
                    "EXAMOE_OPENMP_BLAS at one; examoe warns at start-up and names the environment fix.")
  endif()
endif()
