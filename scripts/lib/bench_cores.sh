#!/usr/bin/env bash
# scripts/bench.sh --cores N (N >= 2): ExaMoE's N-core layouts against
# PyTorch's on the same deck and the same batches, in one run
# (docs/architecture.md, "Performance method"; docs/performance.md).
#
#   scripts/bench.sh --cores N [DECK] [--steps N (6)] [--warmup N (2)] [--set k=v ...]
#   BUILD=dir         Serial build (bin/examoe, bin/examoe-bench; default build)
#   BUILD_OPENMP=dir  OpenMP build (default build-openmp)
#   OUT=file          also append the JSON line to this file
#   WORK=dir          keep the runs there (default: a temporary directory)
#   MPIEXEC=cmd       the MPI launcher (default mpiexec)
#
# Layouts (a layout whose build is missing is skipped, and the report says so):
#   examoe serial  N ranks x 1 thread (mpiexec -n N, dp = N)
#   examoe openmp  N ranks x 1 thread
#   examoe openmp  1 rank  x N threads (grad_accum x N: the same samples)
#   pytorch ddp    N processes x 1 thread (DDP over gloo)
#   pytorch        1 process x N threads (torch.set_num_threads(N))
# The batches: examoe-bench --export-batches writes the global batch of N
# dp ranks (cfg.json, tokens.bin) that every layout trains on, and measures
# the one-core sgemm peak; MFU is against N times it, in CPU time
# (bench_cores_report.py says why). ExaMoE's tokens/s are the median over
# the timed steps of rank 0's metrics.jsonl, PyTorch's the median of its
# timed steps (tests/reference/bench_torch.py); both in wall time, so on a
# loaded machine they are indicative (the load average is
# printed before and after).
set -euo pipefail
here=$(cd "$(dirname "$0")/../.." && pwd)
cores=$1
shift
case "$cores" in ''|*[!0-9]*) echo "bench.sh: --cores wants a number of cores, not '$cores'" >&2; exit 2 ;; esac
[ "$cores" -ge 2 ] || { echo "bench.sh: --cores $cores: use 2 or more (without --cores: one core)" >&2; exit 2; }
serial=${BUILD:-$here/build}
openmp=${BUILD_OPENMP:-$here/build-openmp}
EXAMOE=$serial/bin/examoe
[ -x "$EXAMOE" ] || EXAMOE=$openmp/bin/examoe
bench_name="bench.sh --cores"
# shellcheck source=scripts/lib/bench_args.sh
source "$here/scripts/lib/bench_args.sh"
python=/usr/bin/python3
mpiexec=$MPIEXEC
export PYTHONDONTWRITEBYTECODE=1

# shellcheck source=scripts/lib/blas_env.sh
. "$here/scripts/lib/blas_env.sh"
exa_blas_coretype bench "ExaMoE and PyTorch" "$python"

have() { [ -x "$1/bin/examoe" ]; }
exporter=
for b in "$serial" "$openmp"; do [ -x "$b/bin/examoe-bench" ] && { exporter=$b/bin/examoe-bench; break; }; done
[ -n "$exporter" ] || { echo "bench.sh --cores: no examoe-bench in $serial or $openmp (scripts/setup.sh)" >&2; exit 1; }
echo "[bench] $(date -u +%FT%TZ) $cores-core comparison, $(getconf _NPROCESSORS_ONLN) cores online," \
     "load average $(cut -d' ' -f1-3 /proc/loadavg), OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<auto>}" >&2
cut -d' ' -f1 /proc/loadavg >"$work/load_before"
OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$exporter" "$deck" "${sets[@]}" --steps "$steps" --warmup "$warmup" \
  --export-batches "$work/batches" --export-ranks "$cores" | grep '^{' | tail -n 1 >"$work/export.json"
ga=$("$python" -c 'import json,sys; print(json.load(open(sys.argv[1]))["grad_accum"])' "$work/export.json")
per_rank=$((ga / cores))

# examoe NAME RANKS THREADS BUILD [--set ...]: one trainer run into $work/NAME.
examoe() {
  local name=$1 ranks=$2 threads=$3 build=$4
  shift 4
  echo "[bench] examoe $name: $ranks rank(s) x $threads thread(s), $build" >&2
  rm -rf "$work/$name"
  # One thread per rank: every pool pinned to 1. Several threads: the
  # build's defaults (OMP_NUM_THREADS only; an OpenMP build's BLAS runs on
  # OpenMP's threads), and examoe's start-up warnings go into the report.
  local blas=(env OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1)
  [ "$threads" -gt 1 ] && blas=(env -u OPENBLAS_NUM_THREADS -u MKL_NUM_THREADS)
  OMP_NUM_THREADS=$threads "${blas[@]}" \
    "$mpiexec" -n "$ranks" "$build/bin/examoe" "$deck" "${sets[@]}" "$@" \
    --set train.steps="$total" --set train.log_every=1 --set train.eval_every=0 --set checkpoint.every=0 \
    --set output.run_dir="$work/$name" >"$work/$name.log" 2>&1 \
    || { tail -20 "$work/$name.log" >&2; exit 1; }
  { grep -o 'warning: examoe: .*' "$work/$name.log" || true; } | sort -u | sed "s/^/$name: /" >>"$work/warnings"
}
# torch NAME NPROC THREADS: one bench_torch.py run, its JSON line into $work/NAME.json.
torch() {
  local name=$1 nproc=$2 threads=$3
  echo "[bench] pytorch $name: $nproc process(es) x $threads thread(s)" >&2
  OMP_NUM_THREADS=$threads OPENBLAS_NUM_THREADS=$threads MKL_NUM_THREADS=$threads \
    "$python" "$here/tests/reference/bench_torch.py" --config "$work/batches/cfg.json" \
    --tokens "$work/batches/tokens.bin" --steps "$steps" --warmup "$warmup" --nproc "$nproc" --threads "$threads" \
    2>"$work/$name.log" | grep '^{' | tail -n 1 >"$work/$name.json" \
    || { tail -20 "$work/$name.log" >&2; exit 1; }
}

skipped=()
: >"$work/warnings"
if have "$serial"; then
  examoe serial_ranks "$cores" 1 "$serial" --set train.grad_accum="$per_rank"
else
  skipped+=("serial_ranks: no $serial/bin/examoe (BUILD=dir)")
fi
if have "$openmp"; then
  examoe openmp_ranks "$cores" 1 "$openmp" --set train.grad_accum="$per_rank"
  examoe openmp_threads 1 "$cores" "$openmp" --set train.grad_accum="$ga"
else
  skipped+=("openmp_ranks, openmp_threads: no $openmp/bin/examoe (BUILD_OPENMP=dir)")
fi
torch torch_ddp "$cores" 1
torch torch_threads 1 "$cores"
cut -d' ' -f1 /proc/loadavg >"$work/load_after"
printf '%s\n' "${skipped[@]+"${skipped[@]}"}" >"$work/skipped"
"$python" "$here/scripts/lib/bench_cores_report.py" "$work" "$cores" "$warmup" | tee "$work/report.txt"
if [ -n "${OUT:-}" ]; then
  grep '^{' "$work/report.txt" | tail -n 1 >>"$OUT"
fi
