#!/usr/bin/env bash
# Stall of asynchronous checkpoints against the synchronous write of the same
# checkpoints: input/bench.toml with a checkpoint every 10 steps, once with
# checkpoint.async = false and once with true, on one rank.
#
#   scripts/bench_async_ckpt.sh [BUILD_DIR] [STEPS] [--set k=v]...   (default build, 30)
#
# Extra --set arguments go to both runs (e.g. --set train.micro_batch=1 for
# shorter steps on a slow machine: the checkpoint is the same size).
#
# Prints, per checkpoint step, the synchronous write time, the async run's
# training stall (snapshot copy, plus any wait for the previous write) and
# its background write time, and stall / synchronous write. Timings on a
# shared machine are noisy: run it when the machine is quiet, and compare
# within one invocation only.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${1:-$root/build}
steps=${2:-30}
shift $(($# < 2 ? $# : 2))
extra=("$@")
work=$(mktemp -d "${TMPDIR:-/tmp}/examoe-async-ckpt.XXXXXX")
trap 'rm -rf "$work"' EXIT
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=1
run() {
  "$build/bin/examoe" "$root/input/bench.toml" --set train.steps="$steps" --set checkpoint.every=10 \
    --set checkpoint.keep=0 --set output.run_dir="$work/$1" --set checkpoint.async="$2" "${extra[@]}" >"$work/$1.log" 2>&1 \
    || { cat "$work/$1.log" >&2; exit 1; }
}
run sync false
run async true
# "checkpoint: wrote .../step_00000010 in 1.234 s"
sync_times=$(sed -n 's/.*checkpoint: wrote .*step_0*\([0-9]*\) in \([0-9.]*\) s$/\1 \2/p' "$work/sync.log")
# "checkpoint: wrote .../step_00000010 in the background in W s; training stalled S s for it (...; X s of that waiting ...)"
async_times=$(sed -n 's/.*checkpoint: wrote .*step_0*\([0-9]*\) in the background in \([0-9.]*\) s; training stalled \([0-9.]*\) s.*/\1 \2 \3/p' "$work/async.log")
size=$(du -sm "$work/sync/ckpt/step_$(printf %08d 10)" | cut -f1)
echo "bench.toml ${extra[*]}, $steps steps, a checkpoint every 10 steps (${size} MiB each), OMP_NUM_THREADS=$OMP_NUM_THREADS"
printf "%6s %14s %14s %16s %14s\n" step "sync write s" "async stall s" "async write s" "stall/sync"
join <(sort -k1,1 <<<"$sync_times") <(sort -k1,1 <<<"$async_times") | sort -n | while read -r s w aw st; do
  printf "%6s %14.4f %14.4f %16.4f %13.2f%%\n" "$s" "$w" "$st" "$aw" "$(awk "BEGIN{print 100*$st/$w}")"
done
grep -h "waited .* for the async write" "$work/async.log" | sed 's/^/async run: /' || true
