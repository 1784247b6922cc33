#!/usr/bin/env bash
# Expert growth's two measurements (docs/performance.md, "Expert growth"),
# on one rank of input/grow.toml, one run after another on an idle machine:
#
#   scripts/growth-bench.sh speed [EVERY]   examoe-bench --growth: grown (64
#       -> 96, an event every EVERY steps, default 200, distilling for
#       EVERY/5 steps after each) against a static run at the average count
#       (80) over the same steps, and the same growth without distillation:
#       tokens/s, the ratios, each event's stall, the teacher's share.
#   scripts/growth-bench.sh quality         grow.toml's 5000 steps (64 -> 96,
#       with and without distillation) against static 64 and static 96
#       experts with the same tokens: the validation losses and
#       docs/growth_loss.png.
#
# EXAMOE and EXAMOE_BENCH (default build/bin/), WORK (default a temporary
# directory) and PYTHON (default python3; the plot needs matplotlib).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
examoe=${EXAMOE:-$root/build/bin/examoe}
work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
rm -rf "$work"/{grown,plain,s64,s96,speed}  # metrics.jsonl appends: start clean
deck=$root/input/grow.toml
export OMP_NUM_THREADS=${OMP_NUM_THREADS:-1} OPENBLAS_NUM_THREADS=1
common=(--set checkpoint.every=0)
case "${1:-}" in
  speed)
    every=${2:-200}
    # examoe-bench --growth: grown with distillation, grown without, and
    # static at the mean count, alternated in one process.
    "${EXAMOE_BENCH:-$root/build/bin/examoe-bench}" "$deck" --growth --workdir "$work/speed" \
      --set train.steps=$((5 * every)) --set growth.every="$every" --set growth.distill_steps=$((every / 5)) \
      >"$work/speed.log" 2>&1
    sed -n '/^expert growth/,/^{/p' "$work/speed.log"
    ;;
  quality)
    "$examoe" "$deck" "${common[@]}" --set output.run_dir="$work/grown" >"$work/grown.log" 2>&1
    "$examoe" "$deck" "${common[@]}" --set growth.distill_steps=0 --set output.run_dir="$work/plain" \
      >"$work/plain.log" 2>&1
    "$examoe" "$deck" "${common[@]}" --set growth.every=0 --set growth.distill_steps=0 --set output.run_dir="$work/s64" >"$work/s64.log" 2>&1
    "$examoe" "$deck" "${common[@]}" --set growth.every=0 --set growth.distill_steps=0 --set moe.n_experts=96 --set output.run_dir="$work/s96" \
      >"$work/s96.log" 2>&1
    "${PYTHON:-python3}" "$root/scripts/lib/growth_report.py" quality "$root/docs/growth_loss.png" \
      "grown 64->96, distilled=$work/grown" "grown 64->96=$work/plain" "static 64=$work/s64" \
      "static 96=$work/s96"
    ;;
  *)
    sed -n '2,13p' "$0"
    exit 2
    ;;
esac
echo "runs in $work"
