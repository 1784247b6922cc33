#!/usr/bin/env bash
# Sets up and builds ExaMoE on Debian 12. Idempotent and quiet when there is
# nothing left to do.
#
#   scripts/setup.sh                 # Serial (Debian's Kokkos) -> build/
#   scripts/setup.sh openmp          # OpenMP Kokkos built from Debian source -> build-openmp/
#   scripts/setup.sh cuda            # CUDA Kokkos (nvcc 11.8, sm_80), compile only -> build-cuda/
#                                    # (libraries, drivers, benchmarks; EXAMOE_CUDA_TESTS=ON adds the tests)
#
# Environment: JOBS (default 2), EXAMOE_CACHE (default ~/.cache/examoe),
# BUILD_DIR (override the build directory), CMAKE_ARGS (extra cmake flags),
# EXAMOE_UNITY_BUILD (ON: a new build directory compiles each library in
# batches of 8 sources; default OFF here, ON from test.sh and quickstart.sh).
# EXAMOE_ARCH (CPU target of ExaMoE's own code, -march=; default native for
# serial and openmp, empty for cuda, whose kernels run on the GPU; set it
# empty for a binary that must run on other CPUs).
# TARGETS (space-separated CMake targets to build; default all of them;
# `none` configures and builds nothing). EXAMOE_PROGRESS (ON: print the
# build's percentage at each 10% and each target built, and a line after 30 s
# without one, so a long batch is not minutes of silence; default OFF, quiet).
set -euo pipefail
backend=${1:-serial}
root=$(cd "$(dirname "$0")/.." && pwd)
JOBS=${JOBS:-2}
export JOBS

"$root/scripts/deps-debian.sh"
args=(-DCMAKE_BUILD_TYPE=Release)
# A batch shares one parse of the Kokkos headers (~2.5 s a source on these
# cores): a from-scratch build of a library takes about half the CPU time,
# while an edit recompiles its whole batch. So one-off builds (CI, the quick
# start, Spack) use it and a developer's tree need not.
if [ "${EXAMOE_UNITY_BUILD:-OFF}" = ON ]; then
  args+=(-DCMAKE_UNITY_BUILD=ON -DCMAKE_UNITY_BUILD_BATCH_SIZE=8)
fi
case "$backend" in
  serial) build=${BUILD_DIR:-$root/build}
    args+=(-DEXAMOE_ARCH="${EXAMOE_ARCH-native}") ;;
  openmp)
    build=${BUILD_DIR:-$root/build-openmp}
    # BLAS on OpenMP's own threads: one thread pool per rank (cmake/ExaMoEBlas.cmake).
    "$root/scripts/deps-debian.sh" libopenblas-openmp-dev
    args+=(-DEXAMOE_ARCH="${EXAMOE_ARCH-native}")
    kokkos=$("$root/scripts/build-kokkos.sh" openmp)
    args+=(-DKokkos_ROOT="$kokkos" -DKokkosKernels_ROOT="$kokkos" -DCMAKE_PREFIX_PATH="$kokkos"
           -DEXAMOE_TEST_BACKENDS=OpenMP) ;;
  cuda)
    build=${BUILD_DIR:-$root/build-cuda}
    "$root/scripts/deps-cuda.sh"
    kokkos=$("$root/scripts/build-kokkos.sh" cuda)
    export NVCC_WRAPPER_DEFAULT_COMPILER=${NVCC_WRAPPER_DEFAULT_COMPILER:-g++-11}
    # nvcc 11.8 must not pick up a newer CUDA's ptxas or libraries (/usr/local).
    export CUDA_ROOT=${CUDA_ROOT:-/usr} CUDAToolkit_ROOT=${CUDAToolkit_ROOT:-/usr}
    export PATH=/usr/bin:$PATH; unset CUDA_HOME CUDA_PATH LIBRARY_PATH
    args+=(-DKokkos_ROOT="$kokkos" -DKokkosKernels_ROOT="$kokkos" -DCMAKE_PREFIX_PATH="$kokkos"
           -DCMAKE_CXX_COMPILER="$kokkos/bin/nvcc_wrapper" -DCMAKE_C_COMPILER=gcc-11 -DEXAMOE_ARCH="${EXAMOE_ARCH-}"
           -DEXAMOE_ENABLE_TESTS=${EXAMOE_CUDA_TESTS:-OFF}) ;;
  *) echo "setup.sh: unknown backend '$backend' (want serial, openmp or cuda)" >&2; exit 2 ;;
esac

if [ ! -f "$build/CMakeCache.txt" ]; then
  echo "[setup] configuring $backend build in $build"
  cmake -S "$root" -B "$build" "${args[@]}" ${CMAKE_ARGS:-} >"$build.configure.log" 2>&1 \
    || { cat "$build.configure.log" >&2; exit 1; }
  sed -n '/ExaMoE .* configuration/,/install prefix/p' "$build.configure.log"
fi
[ "${TARGETS:-}" = none ] && exit 0
targets=()
for t in ${TARGETS:-}; do targets+=(--target "$t"); done

mmss() { if [ "$1" -ge 60 ]; then printf '%d min %02d s' $(($1 / 60)) $(($1 % 60)); else printf '%d s' "$1"; fi; }
# Reads the build's output (Makefiles' "[ NN%]" or Ninja's "[N/M]" lines).
progress() {
  local t0=$SECONDS line part="" pct=0 shown=-1 lib="" eof="" msg
  while [ -z "$eof" ]; do
    if IFS= read -r -t 30 line; then line=$part$line; part=""
    elif [ $? -gt 128 ]; then  # 30 s without a line: a batch is compiling
      part+=$line
      printf '[build] %3d%%  still compiling %s (%s)\n' "$pct" "${lib:-...}" "$(mmss $((SECONDS - t0)))"
      continue
    else line=$part$line; eof=1; [ -n "$line" ] || break
    fi
    if [[ $line =~ ^\[\ *([0-9]+)%\]\ (.*) ]]; then pct=${BASH_REMATCH[1]}; msg=${BASH_REMATCH[2]}
    elif [[ $line =~ ^\[([0-9]+)/([0-9]+)\]\ (.*) ]]; then
      pct=$((100 * BASH_REMATCH[1] / BASH_REMATCH[2])); msg=${BASH_REMATCH[3]}
    else continue
    fi
    [[ $msg =~ CMakeFiles/([^/]+)\.dir/ ]] && lib=${BASH_REMATCH[1]}
    if [[ $msg =~ ^Built\ target\ (.*) ]]; then
      printf '[build] %3d%%  built %s (%s)\n' "$pct" "${BASH_REMATCH[1]}" "$(mmss $((SECONDS - t0)))"
    elif [ $((pct / 10)) -gt $((shown / 10)) ]; then
      printf '[build] %3d%%  compiling %s (%s)\n' "$pct" "${lib:-...}" "$(mmss $((SECONDS - t0)))"
    else continue
    fi
    shown=$pct
  done
}
# Quiet unless something fails (or EXAMOE_PROGRESS=ON); make's "up to date"
# chatter is dropped.
if [ "${EXAMOE_PROGRESS:-OFF}" = ON ]; then
  build_cmd() { cmake --build "$build" -j "$JOBS" "${targets[@]}" 2>&1 | tee "$build.build.log" | progress; }
else
  build_cmd() { cmake --build "$build" -j "$JOBS" "${targets[@]}" >"$build.build.log" 2>&1; }
fi
if ! build_cmd; then
  grep -E "error|Error" -A3 "$build.build.log" | head -60 >&2
  echo "[setup] build failed; full log: $build.build.log" >&2
  exit 1
fi
