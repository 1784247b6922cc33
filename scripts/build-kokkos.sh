#!/usr/bin/env bash
# Builds Kokkos + Kokkos Kernels 3.4.1 from Debian's own `trilinos` source
# package, for the OpenMP or the CUDA backend, into a cache outside the clone:
#   $EXAMOE_CACHE/kokkos-3.4.1-<backend>-r<RECIPE>/
# Keyed by version and recipe number (bump RECIPE when the flags below
# change), so a reused machine skips the build and a new one builds it.
# Prints the install prefix on stdout.
#
#   scripts/build-kokkos.sh openmp     # Serial + OpenMP, BLAS TPL (OpenBLAS)
#   scripts/build-kokkos.sh cuda       # Serial + CUDA (sm_80, nvcc 11.8 + g++-11)
set -euo pipefail
backend=${1:?usage: build-kokkos.sh openmp|cuda}
here=$(cd "$(dirname "$0")" && pwd)
CACHE=${EXAMOE_CACHE:-$HOME/.cache/examoe}
TRILINOS_VERSION=13.2.0-4          # Debian 12's trilinos, which carries Kokkos 3.4.1
KOKKOS_VERSION=3.4.1
JOBS=${JOBS:-2}
RECIPE=1
prefix=$CACHE/kokkos-$KOKKOS_VERSION-$backend-r$RECIPE
log() { echo "[kokkos-$backend] $*" >&2; }

if [ -f "$prefix/.complete" ]; then
  echo "$prefix"; exit 0
fi

# Source: Debian's trilinos source package (deb-src entry added if missing).
src=$CACHE/src/trilinos-$TRILINOS_VERSION
if [ ! -d "$src/packages/kokkos-kernels" ]; then
  "$here/apt-sources.sh" deb-src
  mkdir -p "$CACHE/src/dl" && cd "$CACHE/src/dl"
  [ -f trilinos_13.2.0.orig.tar.gz ] || { log "downloading trilinos source package"; apt-get source -qq --download-only "trilinos=$TRILINOS_VERSION" >&2; }
  log "unpacking packages/kokkos and packages/kokkos-kernels"
  rm -rf "$src.tmp" && mkdir -p "$src.tmp"
  tar -xzf trilinos_13.2.0.orig.tar.gz -C "$src.tmp" --strip-components=1 \
      Trilinos-trilinos-release-13-2-0/packages/kokkos Trilinos-trilinos-release-13-2-0/packages/kokkos-kernels
  rm -rf "$src" && mv "$src.tmp" "$src"
fi

work=$CACHE/build/kokkos-$backend-r$RECIPE
rm -rf "$work" "$prefix"
mkdir -p "$work"
common=(-DCMAKE_BUILD_TYPE=Release -DCMAKE_CXX_STANDARD=17 -DCMAKE_INSTALL_PREFIX="$prefix"
        -DBUILD_SHARED_LIBS=ON -DCMAKE_INSTALL_LIBDIR=lib)
case "$backend" in
  openmp)
    kk=(-DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_OPENMP=ON)
    kkk=(-DKokkosKernels_ENABLE_TPL_BLAS=ON)
    cxx=(-DCMAKE_CXX_COMPILER=g++) ;;
  cuda)
    # Debian's nvcc 11.8 and its ptxas live in /usr/bin; a newer CUDA in
    # /usr/local may come first on PATH, so pin nvcc_wrapper and CMake to /usr.
    export CUDA_ROOT=${CUDA_ROOT:-/usr} CUDAToolkit_ROOT=${CUDAToolkit_ROOT:-/usr}
    export PATH=/usr/bin:$PATH; unset CUDA_HOME CUDA_PATH LIBRARY_PATH
    [ -x "$CUDA_ROOT/bin/nvcc" ] || { log "$CUDA_ROOT/bin/nvcc not found: run scripts/deps-cuda.sh first"; exit 1; }
    export NVCC_WRAPPER_DEFAULT_COMPILER=${NVCC_WRAPPER_DEFAULT_COMPILER:-g++-11}
    kk=(-DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_CUDA_LAMBDA=ON
        -DKokkos_ARCH_${KOKKOS_CUDA_ARCH:-AMPERE80}=ON)
    kkk=(-DKokkosKernels_ENABLE_TPL_CUBLAS=ON -DKokkosKernels_ENABLE_TPL_BLAS=ON)
    cxx=(-DCMAKE_CXX_COMPILER="$src/packages/kokkos/bin/nvcc_wrapper") ;;
  *) log "unknown backend '$backend' (want openmp or cuda)"; exit 1 ;;
esac

log "configuring Kokkos $KOKKOS_VERSION"
cmake -S "$src/packages/kokkos" -B "$work/kokkos" "${common[@]}" "${cxx[@]}" "${kk[@]}" >"$work/kokkos.log" 2>&1 \
  || { tail -30 "$work/kokkos.log" >&2; exit 1; }
log "building Kokkos ($JOBS jobs)"
cmake --build "$work/kokkos" -j "$JOBS" >>"$work/kokkos.log" 2>&1 && cmake --install "$work/kokkos" >>"$work/kokkos.log" 2>&1 \
  || { tail -30 "$work/kokkos.log" >&2; exit 1; }

# Kokkos Kernels without default explicit instantiations: ExaMoE calls few
# Kokkos Kernels entry points (gemm, through the BLAS/cuBLAS TPL) and
# instantiates them itself; the default ETI set would take ~20 min on 2 cores.
log "configuring Kokkos Kernels $KOKKOS_VERSION"
cmake -S "$src/packages/kokkos-kernels" -B "$work/kk" "${common[@]}" "${cxx[@]}" -DKokkos_ROOT="$prefix" "${kkk[@]}" \
      -DKokkosKernels_ADD_DEFAULT_ETI=OFF -DKokkosKernels_ENABLE_TESTS=OFF -DKokkosKernels_ENABLE_EXAMPLES=OFF \
      -DKokkosKernels_ENABLE_PERFTESTS=OFF >"$work/kk.log" 2>&1 \
  || { tail -30 "$work/kk.log" >&2; exit 1; }
log "building Kokkos Kernels ($JOBS jobs)"
cmake --build "$work/kk" -j "$JOBS" >>"$work/kk.log" 2>&1 && cmake --install "$work/kk" >>"$work/kk.log" 2>&1 \
  || { tail -30 "$work/kk.log" >&2; exit 1; }

cp "$src/packages/kokkos/bin/nvcc_wrapper" "$prefix/bin/" 2>/dev/null || true
touch "$prefix/.complete"
rm -rf "$work"
log "installed into $prefix"
echo "$prefix"
