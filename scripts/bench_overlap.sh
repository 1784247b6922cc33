#!/usr/bin/env bash
# The overlap and scaling benchmark (comm.overlap): exposed communication with
# the gradient collectives overlapped with the backward pass and without,
# and the weak-scaling efficiency of NP data-parallel ranks against one.
#
#   scripts/bench_overlap.sh [DECK] [--steps N] [--warmup N] [--zero Z] [--repeat R] [--set k=v ...]
#     DECK        default input/bench.toml
#     --steps N   measured steps per run (default 8)
#     --warmup N  steps run first and not measured (default 2)
#     --zero Z    parallel.zero of the NP-rank runs (default 0); the 1-rank
#                 reference always runs zero 0 (plain replica, no sharding)
#     --repeat R  run the three configurations round-robin R times
#                 (default 1) and pool their measured steps
#     --set k=v   deck overrides for every run (repeatable; train.steps,
#                 train.log_every, train.eval_every, checkpoint.every,
#                 parallel.zero, comm.overlap and output.run_dir are the
#                 benchmark's)
#   NP=n        data-parallel ranks (default 2)
#   EXAMOE=path the binary (default $BUILD/bin/examoe, BUILD default build;
#               scripts/setup.sh builds it)
#   MPIEXEC=cmd the MPI launcher (default: mpiexec)
#   WORK=dir    keep the run directories and logs there (default: a
#               temporary directory, removed at exit)
#   OUT=file    also append the result's JSON line to this file
#
# The command line and the runs are scripts/lib/bench_args.sh's, the
# summary scripts/lib/metrics_summary.py's (shared with
# scripts/bench_layouts.sh, which compares the parallel layouts).
#
# Three runs, same per-rank micro-batch (weak scaling: the global batch
# grows with the ranks): 1 rank; NP ranks with comm.overlap = true; NP ranks
# with comm.overlap = false. Every step is logged (train.log_every = 1),
# evaluation and checkpoints are off, one thread per rank. The step records
# of rank 0's metrics.jsonl after the warm-up give, per configuration
# (one_rank, overlap_on, overlap_off; medians over the measured steps,
# robust to a busy neighbour's bursts):
#   tok/s      global tokens per second (all ranks together)
#   step       median wall seconds per step (compute + comm + io + eval)
#   compute    median seconds per step not spent in communication calls
#   comm       median exposed communication, seconds per step: time rank 0
#              spent launching, polling and waiting on collectives (what
#              overlap did not hide)
#   comm eff   compute / (compute + comm)
#   weak eff   tok/s(NP ranks) / (NP x tok/s(1 rank))
#   state MiB  parameters + gradients + optimizer + ZeRO buffers per rank
# and the overlap gain: comm(overlap off) - comm(overlap on). It prints a
# table and one JSON line ("event":"bench_overlap", means and extremes
# too, and the per-rank memory record). It never asserts a time. Run it
# with at least NP idle cores: ranks sharing a core measure the scheduler,
# and the load average printed before and after says how busy the machine
# was. BLAS kernels are chosen as
# scripts/bench.sh does (scripts/lib/blas_env.sh).
set -euo pipefail
bench_name=bench_overlap.sh
bench_opts="zero repeat"
opt_zero=0 opt_repeat=1
bench_defaults() { steps=${steps:-8} warmup=${warmup:-2}; }
# shellcheck source=scripts/lib/bench_args.sh
source "$(dirname "$0")/lib/bench_args.sh"
zero=$opt_zero repeat=$opt_repeat
case "$zero" in [0-3]) ;; *) bench_die "--zero wants 0, 1, 2 or 3, not '$zero'" ;; esac
case "$repeat" in ''|*[!0-9]*|0) bench_die "--repeat wants a number >= 1, not '$repeat'" ;; esac
export PYTHONDONTWRITEBYTECODE=1
# shellcheck source=scripts/lib/blas_env.sh
. "$root/scripts/lib/blas_env.sh"
exa_blas_coretype "$bench_name" "every rank"

cores=$(getconf _NPROCESSORS_ONLN)
load_before=$(bench_load)
echo "[$bench_name] $(date -u +%FT%TZ) $cores cores, load average $load_before," \
     "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<auto>}, deck $deck, zero $zero, $NP ranks," \
     "$warmup warm-up + $steps measured steps, $repeat round(s)" >&2
if [ "$cores" -lt "$NP" ]; then
  echo "[$bench_name] warning: $cores cores for $NP ranks: ranks share cores, the numbers measure the scheduler" >&2
fi

# The benchmark's own settings come after --set: they win.
runs=()
for r in $(seq 1 "$repeat"); do
  bench_run "one.$r" 1 "${sets[@]}" --set parallel.zero=0
  bench_run "on.$r" "$NP" "${sets[@]}" --set "parallel.zero=$zero" --set comm.overlap=true
  bench_run "off.$r" "$NP" "${sets[@]}" --set "parallel.zero=$zero" --set comm.overlap=false
  runs+=("one_rank=$work/one.$r" "overlap_on=$work/on.$r" "overlap_off=$work/off.$r")
done
load_after=$(bench_load)

echo "zero $zero; load average $load_before -> $load_after on $cores cores"
result=$(python3 "$root/scripts/lib/metrics_summary.py" --event bench_overlap --warmup "$warmup" \
  --weak one_rank --gain overlap_off,overlap_on --meta deck="$deck" --meta ranks="$NP" --meta zero="$zero" \
  --meta steps="$steps" --meta repeat="$repeat" --meta cores="$cores" --meta load_before="$load_before" \
  --meta load_after="$load_after" --meta openblas_coretype="${OPENBLAS_CORETYPE:-auto}" "${runs[@]}")
echo "$result"
if [ -n "${OUT:-}" ]; then
  grep '^{' <<<"$result" | tail -n 1 >>"$OUT"
fi
