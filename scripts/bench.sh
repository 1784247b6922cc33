#!/usr/bin/env bash
# The performance benchmark of docs/architecture.md ("Performance method"):
# ExaMoE's training step on one rank and one core against PyTorch on the same
# config, batches and core, measured in one run (drivers/examoe_bench.cpp).
#
#   scripts/bench.sh [DECK] [examoe-bench options...]
#   scripts/bench.sh --cores N [DECK] [--steps N] [--warmup N] [--set k=v ...]
#     the N-core comparison instead: ExaMoE's N ranks x 1 thread and 1 rank x
#     N threads against PyTorch's DDP and N-thread runs, same batches
#     (scripts/lib/bench_cores.sh says how; BUILD_OPENMP=dir the OpenMP build)
#     DECK      default input/bench.toml
#     options   --steps N (5) --warmup N (2) --set k=v ... --no-torch
#   PRECISIONS="fp32 bf16"  the precision.compute values to run, one
#               examoe-bench run each (against PyTorch at the same
#               precision: torch.autocast for bf16), tabulated at the end
#               with tokens/s, the GEMM peak of that precision and the MFU
#               against it (scripts/lib/bench_precision_report.py)
#   BUILD=dir   build directory holding bin/examoe-bench (default: build),
#               configured and built (examoe-bench only) when missing
#   OUT=file    also append the result's JSON line to this file
#
# One thread everywhere (OpenMP, OpenBLAS, MKL), Debian's /usr/bin/python3
# for torch. On a shared machine read the CPU-time columns (see the report
# header); the load average is printed before and after.
#
# BLAS kernels. Debian's OpenBLAS (0.3.21, DYNAMIC_ARCH) does not recognise
# some recent CPUs (e.g. Sapphire Rapids under a hypervisor) and falls back
# to its generic "Prescott" SSE3 kernels, ~5x slower than its AVX-512 ones on
# the same core. ExaMoE and PyTorch share that library, so both are affected
# alike, but the benchmark would then measure a machine nobody runs on. When
# OPENBLAS_CORETYPE is unset and OpenBLAS picks Prescott on a CPU with
# AVX-512 (AVX2), this script sets OPENBLAS_CORETYPE=SkylakeX (Haswell) and
# says so; set OPENBLAS_CORETYPE yourself to choose, or BLAS_AUTODETECT=1 to
# keep OpenBLAS's own choice (scripts/lib/blas_env.sh, shared with
# scripts/bench_overlap.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
if [ "${1:-}" = --cores ]; then
  shift
  exec "$here/scripts/lib/bench_cores.sh" "${1:?bench.sh: --cores wants a number}" "${@:2}"
fi
deck=${1:-$here/input/bench.toml}
[ $# -gt 0 ] && shift
build=${BUILD:-$here/build}
exe=$build/bin/examoe-bench
python=/usr/bin/python3
if [ ! -x "$exe" ]; then
  echo "[bench] building examoe-bench in $build" >&2
  cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  make -C "$build" -j"${JOBS:-1}" examoe-bench >/dev/null
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1

# shellcheck source=scripts/lib/blas_env.sh
. "$here/scripts/lib/blas_env.sh"
exa_blas_coretype bench "both ExaMoE and PyTorch" "$python"

echo "[bench] $(date -u +%FT%TZ) $(getconf _NPROCESSORS_ONLN) cores, load average $(cut -d' ' -f1-3 /proc/loadavg)," \
     "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<auto>}" >&2
logs=()
trap 'rm -f "${logs[@]}"' EXIT
for precision in ${PRECISIONS:-fp32 bf16}; do
  log=$(mktemp)
  logs+=("$log")
  echo "[bench] precision.compute = $precision" >&2
  if ! "$exe" "$deck" --python "$python" "$@" --set precision.compute="$precision" | tee "$log"; then
    echo "[bench] precision.compute = $precision did not run (above); the table leaves it out" >&2
    continue
  fi
  if [ -n "${OUT:-}" ]; then
    grep '^{' "$log" | tail -n 1 >>"$OUT"
  fi
done
"$python" "$here/scripts/lib/bench_precision_report.py" "${logs[@]}"
