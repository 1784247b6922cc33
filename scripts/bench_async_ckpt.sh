#!/usr/bin/env bash
# Stall of asynchronous checkpoints against the synchronous write of the same
# checkpoints: a deck with a checkpoint every K steps, once with
# checkpoint.async = false and once with true.
#
#   scripts/bench_async_ckpt.sh [DECK] [--steps N] [--warmup N] [--every K] [--set k=v ...]
#     DECK        default input/bench.toml
#     --steps N   steps per run after the warm-up (default 30)
#     --warmup N  steps run first and left out of the medians (default 0;
#                 they checkpoint like the others: steps count from 1)
#     --every K   checkpoint.every (default 10)
#     --set k=v   deck overrides for both runs (repeatable; e.g. --set
#                 train.micro_batch=1 for shorter steps on a slow machine:
#                 the checkpoint is the same size)
#   NP=n (default 1 rank), OMP_NUM_THREADS (default 1), EXAMOE=path (default
#   $BUILD/bin/examoe, BUILD default build), MPIEXEC=cmd, WORK=dir (keep
#   the runs there; default a temporary directory), OUT=file (also append
#   the JSON line to this file): scripts/lib/bench_args.sh
#
# Prints, per checkpoint step, the synchronous write time, the async run's
# training stall (snapshot copy, plus any wait for the previous write) and
# its background write time, and stall / synchronous write (from the runs'
# log lines); then scripts/lib/metrics_summary.py's table of both runs
# (medians over the steps after the warm-up; step_s_mean in the JSON line
# counts the checkpoint steps in) and one JSON line
# ("event":"bench_async_ckpt", the per-checkpoint times in it too). It
# never asserts a time. Timings on a shared machine are noisy: run it when
# the machine is quiet, and compare within one invocation only.
set -euo pipefail
bench_name=bench_async_ckpt.sh
bench_opts=every
opt_every=10
NP=${NP:-1}
bench_defaults() { steps=${steps:-30} warmup=${warmup:-0}; }
# shellcheck source=scripts/lib/bench_args.sh
source "$(dirname "$0")/lib/bench_args.sh"
every=$opt_every
case "$every" in ''|*[!0-9]*|0) bench_die "--every wants a number >= 1, not '$every'" ;; esac
[ "$total" -ge "$every" ] || bench_die "--steps $total: no checkpoint before step $every"
bench_omp=${OMP_NUM_THREADS:-1}
bench_fixed+=(--set checkpoint.every="$every" --set checkpoint.keep=0)
bench_run sync "$NP" "${sets[@]}" --set checkpoint.async=false
bench_run async "$NP" "${sets[@]}" --set checkpoint.async=true
# "checkpoint: wrote .../step_00000010 in 1.234 s"
sync_times=$(sed -n 's/.*checkpoint: wrote .*step_0*\([0-9]*\) in \([0-9.]*\) s$/\1 \2/p' "$work/sync.log")
# "checkpoint: wrote .../step_00000010 in the background in W s; training stalled S s for it (...; X s of that waiting ...)"
async_times=$(sed -n 's/.*checkpoint: wrote .*step_0*\([0-9]*\) in the background in \([0-9.]*\) s; training stalled \([0-9.]*\) s.*/\1 \2 \3/p' "$work/async.log")
size=$(du -sm "$work/sync/ckpt/step_$(printf %08d "$every")" | cut -f1)
echo "$(basename "$deck") ${sets[*]}, $total steps, a checkpoint every $every steps (${size} MiB each), $NP rank(s), OMP_NUM_THREADS=$bench_omp"
printf "%6s %14s %14s %16s %14s\n" step "sync write s" "async stall s" "async write s" "stall/sync"
joined=$(join <(sort -k1,1 <<<"$sync_times") <(sort -k1,1 <<<"$async_times") | sort -n)
while read -r s w aw st; do
  printf "%6s %14.4f %14.4f %16.4f %13.2f%%\n" "$s" "$w" "$st" "$aw" "$(awk -v s="$st" -v w="$w" 'BEGIN { print (w > 0 ? 100 * s / w : 0) }')"
done <<<"$joined"
grep -h "waited .* for the async write" "$work/async.log" | sed 's/^/async run: /' || true
json_list() { awk -v c="$1" '{ printf "%s%s", (NR > 1 ? "," : ""), $c }' <<<"$joined"; }  # a JSON list of field c
result=$(python3 "$root/scripts/lib/metrics_summary.py" --event bench_async_ckpt --warmup "$warmup" \
  --meta deck="$deck" --meta ranks="$NP" --meta steps="$total" --meta every="$every" --meta ckpt_mib="$size" \
  --meta sets="${sets[*]}" --meta ckpt_steps="[$(json_list 1)]" --meta sync_write_s="[$(json_list 2)]" \
  --meta async_stall_s="[$(json_list 4)]" --meta async_write_s="[$(json_list 3)]" sync="$work/sync" async="$work/async")
echo "$result"
if [ -n "${OUT:-}" ]; then
  grep '^{' <<<"$result" | tail -n 1 >>"$OUT"
fi
