#!/usr/bin/env bash
# Builds Kokkos + Kokkos Kernels for the OpenMP or the CUDA backend into a
# cache outside the clone:
#   $EXAMOE_CACHE/kokkos-<version>-<backend>-r<recipe>/
# Keyed by version and recipe number (bump the version's recipe when its
# flags below change), so a reused machine skips the build and a new one
# builds it. Prints the install prefix on stdout; everything else goes to
# stderr.
#
#   scripts/build-kokkos.sh openmp   # Serial + OpenMP, BLAS TPL (OpenBLAS):
#                                    # 4.6.01 from the release tarballs when present, else 3.4.1
#   scripts/build-kokkos.sh cuda     # Serial + CUDA (sm_80, nvcc 11.8 + g++-11): 3.4.1
#
# Sources:
#   4.6.01  kokkos-4.6.01.tar.gz and kokkos-kernels-4.6.01.tar.gz (upstream
#           tags 4.6.01) in $EXAMOE_KOKKOS_SOURCES, by default tools/kokkos in the
#           directory CI lays beside the checkout; their sha256 is checked.
#   3.4.1   Debian 12's `trilinos` source package (apt-get source), which
#           carries Kokkos and Kokkos Kernels 3.4.1.
# EXAMOE_KOKKOS_VERSION=4.6.01|3.4.1 forces a version (4.6.01 then fails
# when its tarballs are missing instead of falling back). CUDA stays on
# 3.4.1: the one nvcc Debian 12 ships (11.8) is what that leg is built with.
set -euo pipefail
backend=${1:?usage: build-kokkos.sh openmp|cuda}
here=$(cd "$(dirname "$0")" && pwd)
CACHE=${EXAMOE_CACHE:-$HOME/.cache/examoe}
SOURCES=${EXAMOE_KOKKOS_SOURCES:-$(cd "$here/../.." && pwd)/shared/tools/kokkos}
TRILINOS_VERSION=13.2.0-4          # Debian 12's trilinos, which carries Kokkos 3.4.1
JOBS=${JOBS:-2}
log() { echo "[kokkos-$backend] $*" >&2; }
die() { log "error: $*"; exit 1; }

case "$backend" in openmp|cuda) ;; *) die "unknown backend '$backend' (want openmp or cuda)" ;; esac

# Version: forced, or the newest this backend can have here.
KK4=4.6.01
declare -A SHA256=(
  [kokkos-$KK4.tar.gz]=b9d70e4653b87a06dbb48d63291bf248058c7c7db4bd91979676ad5609bb1a3a
  [kokkos-kernels-$KK4.tar.gz]=95b9357f37ab3b9c3913c00741acb2501831c28ea8664de67818ae79c69c5908
)
have_kk4() { [ -f "$SOURCES/kokkos-$KK4.tar.gz" ] && [ -f "$SOURCES/kokkos-kernels-$KK4.tar.gz" ]; }
version=${EXAMOE_KOKKOS_VERSION:-}
case "$version" in
  "")
    if [ "$backend" = cuda ]; then
      version=3.4.1
    elif have_kk4; then
      version=$KK4
    else
      version=3.4.1
      log "NOTE: no Kokkos $KK4 sources in $SOURCES (kokkos-$KK4.tar.gz, kokkos-kernels-$KK4.tar.gz);"
      log "NOTE: falling back to Kokkos 3.4.1 from Debian's trilinos source package."
      log "NOTE: set EXAMOE_KOKKOS_SOURCES to the directory holding them for the $KK4 build."
    fi ;;
  3.4.1) ;;
  "$KK4")
    [ "$backend" = cuda ] && die "EXAMOE_KOKKOS_VERSION=$KK4: the cuda backend builds Kokkos 3.4.1 only (nvcc 11.8); unset it"
    have_kk4 || die "EXAMOE_KOKKOS_VERSION=$KK4 but $SOURCES lacks kokkos-$KK4.tar.gz or kokkos-kernels-$KK4.tar.gz; set EXAMOE_KOKKOS_SOURCES to their directory, or unset EXAMOE_KOKKOS_VERSION for 3.4.1" ;;
  *) die "EXAMOE_KOKKOS_VERSION='$version' is not one this script builds (want $KK4 or 3.4.1)" ;;
esac

# Recipe numbers, one per version: bump one when its flags change.
case "$version" in 3.4.1) RECIPE=1 ;; *) RECIPE=1 ;; esac
prefix=$CACHE/kokkos-$version-$backend-r$RECIPE
if [ -f "$prefix/.complete" ]; then
  log "Kokkos $version (cached: $prefix)"
  echo "$prefix"; exit 0
fi
log "building Kokkos $version into $prefix"

if [ "$version" = 3.4.1 ]; then
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
  kokkos_src=$src/packages/kokkos
  kernels_src=$src/packages/kokkos-kernels
else
  src=$CACHE/src/kokkos-$KK4
  if [ ! -d "$src/kokkos-kernels-$KK4" ]; then
    for f in "kokkos-$KK4.tar.gz" "kokkos-kernels-$KK4.tar.gz"; do
      echo "${SHA256[$f]}  $SOURCES/$f" | sha256sum -c --status \
        || die "$SOURCES/$f does not have the sha256 of the $KK4 release tag (${SHA256[$f]}); replace it with the upstream one"
    done
    log "unpacking the $KK4 tarballs"
    rm -rf "$src.tmp" && mkdir -p "$src.tmp"
    tar -xzf "$SOURCES/kokkos-$KK4.tar.gz" -C "$src.tmp"
    tar -xzf "$SOURCES/kokkos-kernels-$KK4.tar.gz" -C "$src.tmp"
    rm -rf "$src" && mv "$src.tmp" "$src"
  fi
  kokkos_src=$src/kokkos-$KK4
  kernels_src=$src/kokkos-kernels-$KK4
fi

work=$CACHE/build/kokkos-$version-$backend-r$RECIPE
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
    [ -x "$CUDA_ROOT/bin/nvcc" ] || die "$CUDA_ROOT/bin/nvcc not found: run scripts/deps-cuda.sh first"
    export NVCC_WRAPPER_DEFAULT_COMPILER=${NVCC_WRAPPER_DEFAULT_COMPILER:-g++-11}
    kk=(-DKokkos_ENABLE_SERIAL=ON -DKokkos_ENABLE_CUDA=ON -DKokkos_ENABLE_CUDA_LAMBDA=ON
        -DKokkos_ARCH_${KOKKOS_CUDA_ARCH:-AMPERE80}=ON)
    kkk=(-DKokkosKernels_ENABLE_TPL_CUBLAS=ON -DKokkosKernels_ENABLE_TPL_BLAS=ON)
    cxx=(-DCMAKE_CXX_COMPILER="$kokkos_src/bin/nvcc_wrapper") ;;
esac
if [ "$version" != 3.4.1 ]; then
  # 4.x builds every component by default; ExaMoE calls BLAS only.
  kkk+=(-DKokkosKernels_ENABLE_ALL_COMPONENTS=OFF -DKokkosKernels_ENABLE_COMPONENT_BLAS=ON)
fi

log "configuring Kokkos $version"
cmake -S "$kokkos_src" -B "$work/kokkos" "${common[@]}" "${cxx[@]}" "${kk[@]}" >"$work/kokkos.log" 2>&1 \
  || { tail -30 "$work/kokkos.log" >&2; exit 1; }
log "building Kokkos ($JOBS jobs)"
t0=$SECONDS
cmake --build "$work/kokkos" -j "$JOBS" >>"$work/kokkos.log" 2>&1 && cmake --install "$work/kokkos" >>"$work/kokkos.log" 2>&1 \
  || { tail -30 "$work/kokkos.log" >&2; exit 1; }
log "Kokkos $version built in $((SECONDS - t0)) s"

# Kokkos Kernels without default explicit instantiations: ExaMoE calls few
# Kokkos Kernels entry points (gemm, through the BLAS/cuBLAS TPL) and
# instantiates them itself; the default ETI set would take ~20 min on 2 cores.
log "configuring Kokkos Kernels $version"
cmake -S "$kernels_src" -B "$work/kk" "${common[@]}" "${cxx[@]}" -DKokkos_ROOT="$prefix" "${kkk[@]}" \
      -DKokkosKernels_ADD_DEFAULT_ETI=OFF -DKokkosKernels_ENABLE_TESTS=OFF -DKokkosKernels_ENABLE_EXAMPLES=OFF \
      -DKokkosKernels_ENABLE_PERFTESTS=OFF >"$work/kk.log" 2>&1 \
  || { tail -30 "$work/kk.log" >&2; exit 1; }
log "building Kokkos Kernels ($JOBS jobs)"
t0=$SECONDS
cmake --build "$work/kk" -j "$JOBS" >>"$work/kk.log" 2>&1 && cmake --install "$work/kk" >>"$work/kk.log" 2>&1 \
  || { tail -30 "$work/kk.log" >&2; exit 1; }
log "Kokkos Kernels $version built in $((SECONDS - t0)) s"

cp "$kokkos_src/bin/nvcc_wrapper" "$prefix/bin/" 2>/dev/null || true
touch "$prefix/.complete"
rm -rf "$work"
log "installed Kokkos $version into $prefix"
echo "$prefix"
