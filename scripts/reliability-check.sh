#!/usr/bin/env bash
# The reliability model (`examoe-plan reliability`, Young-Daly, first order)
# against measured runs: scripts/soak.sh with failures injected at random
# times of a given mean (MTBF_S), each one relaunching on a hot spare, and
# the model fed the costs the same soak measured.
#
#   scripts/reliability-check.sh [MTBF_S ...] [-- --set k=v ...]
#     (default MTBF_S: 2 4 8; after --, deck overrides for every soak)
#   NP, BUILD, MPIEXEC, MEMORY_EVERY (default 0: tier 2 alone), SEED
#   (default 1), STEPS (default 3000), EVERY (checkpoint.every, default 100),
#   WORK (default a temporary directory): as for scripts/soak.sh.
#
# Times run from the end of step 1 (the launch is paid once by any run) to
# the job's end. The model's inputs, all measured:
#   C   one checkpoint's time: the uninterrupted run's checkpoint I/O over its
#       checkpoints (the last one, after the final step, is in no record);
#   tau the steps between checkpoints times its mean training step;
#   R   the mean time from a kill until the relaunched job logged a step,
#       less that step;
#   M   the run's wall time over its failures (the rate that happened; the
#       injected mean is of running time, and wall time adds the downtime).
# Measured effective training time: the kept steps' training time over the
# wall time, less the final checkpoint and exit that the uninterrupted run
# also pays (its span less its steps and checkpoints). Prints a Markdown
# table and one JSON line per MTBF; exits 1 when a prediction is more than
# 10 points off.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
mtbfs=()
while [ $# -gt 0 ] && [ "$1" != "--" ]; do mtbfs+=("$1"); shift; done
[ "${1:-}" = "--" ] && shift
[ ${#mtbfs[@]} -gt 0 ] || mtbfs=(2 4 8)
BUILD=${BUILD:-$root/build}
work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
: >"$work/results.jsonl"
for m in "${mtbfs[@]}"; do
  echo "[reliability] soak with MTBF_S=$m (log: $work/soak-$m.log)"
  MTBF_S=$m NP=${NP:-2} MEMORY_EVERY=${MEMORY_EVERY:-0} SEED=${SEED:-1} WORK="$work/soak-$m" \
    BUILD="$BUILD" "$root/scripts/soak.sh" --set train.steps="${STEPS:-3000}" \
    --set checkpoint.every="${EVERY:-100}" "$@" >"$work/soak-$m.log" 2>&1 ||
    { tail -20 "$work/soak-$m.log" >&2; exit 1; }
  tail -1 "$work/soak-$m.log" | python3 -c "import json, sys; r = json.load(sys.stdin); r['mtbf_injected_s'] = $m
print(json.dumps(r))" >>"$work/results.jsonl"
done

python3 - "$work/results.jsonl" "$BUILD/bin/examoe-plan" <<'PY'
import json, subprocess, sys
rows, worst = [], 0.0
print("| injected MTBF s | failures | M s | C s | tau s | R s | measured | predicted | error (points) |")
print("|---|---|---|---|---|---|---|---|---|")
for line in open(sys.argv[1]):
    r = json.loads(line)
    ref = r["reference"]
    if r["failures"] == 0 or not r["restart_s"]:
        print(f"| {r['mtbf_injected_s']} | 0 | | | | | | | (no failure: raise STEPS) |")
        continue
    every, steps = ref["checkpoint_every_steps"], ref["steps"]
    step = ref["training_s"] / (steps - 1)  # (the spans start after step 1)
    C = ref["checkpoint_io_s"] / ((steps - 1) // every)
    tau = every * step
    wall = r["span_s"] - (ref["span_s"] - ref["training_s"] - ref["checkpoint_io_s"])
    M = wall / r["failures"]
    R = r["restart_s"] - step  # (it ends with the first step after the resume)
    measured = r["training_s"] / wall
    out = subprocess.run([sys.argv[2], "reliability", "--node-mtbf-hours", repr(M / 3600), "--nodes", "1",
                          "--tier", f"soak:{C!r}:{R!r}", "--interval-s", repr(tau), "--json"],
                         check=True, capture_output=True, text=True).stdout
    predicted = json.loads(out.splitlines()[0])["effective_training_time"]
    err = 100 * (predicted - measured)
    worst = max(worst, abs(err))
    print(f"| {r['mtbf_injected_s']} | {r['failures']} | {M:.2f} | {C:.4f} | {tau:.3f} | {R:.3f} | "
          f"{100 * measured:.1f}% | {100 * predicted:.1f}% | {err:+.1f} |")
    rows.append({"mtbf_injected_s": r["mtbf_injected_s"], "failures": r["failures"], "mtbf_s": M,
                 "checkpoint_s": C, "interval_s": tau, "restart_s": R, "steps_lost": r["steps_lost"],
                 "measured": measured, "predicted": predicted, "error_points": err,
                 "losses_equal_uninterrupted": r["losses_equal_uninterrupted"]})
for row in rows:
    print(json.dumps(row))
print(f"worst error {worst:.1f} points (target: within 10)")
sys.exit(1 if worst > 10 else 0)
PY
