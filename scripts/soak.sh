#!/usr/bin/env bash
# Soak test of elastic restart: a small tiny.toml run on NP ranks
# under examoe-elastic, with a random examoe rank `kill -9`ed at a random
# time, N times, against an uninterrupted run of the same deck.
#
#   scripts/soak.sh [N] [--set k=v ...]
#     N   failures (default 3; each one shrinks the job, and 4 ranks with a
#         global batch of 12 micro-batches allow 4 -> 3 -> 2 -> 1, so more
#         than 3 need growing back, GROW_AFTER_STEPS)
#   NP=n (default 4), BUILD=dir (default build), MPIEXEC=cmd (default
#   mpiexec), WORK=dir (default a temporary directory), SEED=s (random seed),
#   MEMORY_EVERY=k (default 1: tier-0 memory snapshots every step, on pretend
#   one-rank nodes, in /dev/shm/examoe-soak-<pid>; 0: tier 2 alone, every 2
#   steps), GROW_AFTER_STEPS=s (default: none; examoe-elastic --max-ranks NP
#   --grow-after-steps s grows a shrunk job back after s steps).
#
# A killed rank's node memory is lost with it: the tier-0 segments it kept
# are removed right after the kill (its buddy's copies elsewhere survive).
#
# Reports one JSON line: the steps lost beyond the last checkpoint (from the
# restart records), the effective training time (the step times of the steps
# that count, from metrics.jsonl, over the supervisor's wall time), the mean
# downtime per failure (job death to resumed), and whether every step's loss
# equals the uninterrupted run's (1e-5 relative), and the largest relative
# difference. (MoE routing is discontinuous: over many steps, runs in two
# layouts may part by more than 1e-5 even uninterrupted, when the last-bit
# differences of their reduction orders flip a near-tie in the router.)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
failures=${1:-3}
[ $# -gt 0 ] && shift
NP=${NP:-4} BUILD=${BUILD:-$root/build} MPIEXEC=${MPIEXEC:-mpiexec}
RANDOM=${SEED:-$$}
work=${WORK:-$(mktemp -d)}
rm -rf "$work/reference" "$work/elastic"
mkdir -p "$work"
deck=(
  "$root/input/tiny.toml" --set model.n_layers=2 --set model.d_model=64 --set model.seq_len=32
  --set moe.d_expert=64 --set moe.n_experts=4 --set train.steps=24 --set train.micro_batch=2
  --set train.grad_accum=$((12 / NP)) --set train.log_every=1 --set train.eval_every=0
  --set optim.warmup_steps=4 --set checkpoint.every=2 --set resilience.timeout_s=20 "$@"
)
MEMORY_EVERY=${MEMORY_EVERY:-1}
shm=/dev/shm/examoe-soak-$$
tier0=()
[ "$MEMORY_EVERY" -gt 0 ] && tier0=(--set checkpoint.memory_every="$MEMORY_EVERY"
  --set checkpoint.memory_ranks_per_node=1 --set checkpoint.memory_dir="$shm")
grow=()
[ -n "${GROW_AFTER_STEPS:-}" ] && grow=(--max-ranks "$NP" --grow-after-steps "$GROW_AFTER_STEPS")
trap 'rm -rf "$shm"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

echo "[soak] uninterrupted reference on $NP ranks"
"$MPIEXEC" -n "$NP" "$BUILD/bin/examoe" "${deck[@]}" --set output.run_dir="$work/reference" \
  >"$work/reference.log" 2>&1 || { tail -20 "$work/reference.log" >&2; exit 1; }

# The examoe ranks below the supervisor (mpiexec and its proxies between).
ranks_of() {
  local pids=$1 kids all=""
  while [ -n "$pids" ]; do
    kids=""
    for p in $pids; do kids="$kids $(ps -o pid= --ppid "$p" || true)"; done
    all="$all $kids"
    pids=$(echo $kids)
  done
  # (not the supervisor's `examoe --check` probes of a relaunch's layout)
  for p in $all; do
    [ "$(ps -o comm= -p "$p" 2>/dev/null)" = examoe ] && ! tr '\0' ' ' <"/proc/$p/cmdline" 2>/dev/null | grep -q -- --check &&
      echo "$p"
  done
  return 0
}
count() { local n; n=$(grep -c "$1" "$2" 2>/dev/null) || true; echo "${n:-0}"; }
steps_logged() { count '"loss"' "$work/elastic/metrics.jsonl"; }

echo "[soak] $failures failures under examoe-elastic (log: $work/elastic.log)"
t0=$(date +%s.%N)
"$BUILD/bin/examoe-elastic" --ranks "$NP" "${grow[@]}" --mpiexec "$MPIEXEC" "${deck[@]}" "${tier0[@]}" \
  --set output.run_dir="$work/elastic" >"$work/elastic.log" 2>&1 &
sup=$!
for i in $(seq 1 "$failures"); do
  # At a random time after the job logged a few new steps.
  target=$(( $(steps_logged) + 1 + RANDOM % 4 ))
  while kill -0 "$sup" 2>/dev/null && [ "$(steps_logged)" -lt "$target" ]; do sleep 0.2; done
  sleep "0.$((RANDOM % 10))"
  mapfile -t ranks < <(ranks_of "$sup")
  # Between two launches (a grow) there is no rank to kill yet.
  while kill -0 "$sup" 2>/dev/null && [ "${#ranks[@]}" -eq 0 ]; do sleep 0.2; mapfile -t ranks < <(ranks_of "$sup"); done
  if [ "${#ranks[@]}" -eq 0 ]; then echo "[soak] the job ended before failure $i"; break; fi
  victim=${ranks[RANDOM % ${#ranks[@]}]}
  rank=$(tr '\0' '\n' <"/proc/$victim/environ" 2>/dev/null | sed -n 's/^PMI_RANK=//p')
  echo "[soak] failure $i: kill -9 examoe pid $victim (rank ${rank:-?} of ${#ranks[@]}) after $(steps_logged) step records"
  kill -9 "$victim" 2>/dev/null || true
  [ -n "$rank" ] && rm -f "$shm"/examoe-t0-*-h"$rank"
  # Until the relaunched job says where it resumed.
  while kill -0 "$sup" 2>/dev/null && [ "$(grep -v '"grow"' "$work/elastic/elastic.jsonl" 2>/dev/null |
                                           grep -c '"resumed_step":[0-9]')" -lt "$i" ]; do
    sleep 0.2
  done
done
rc=0
wait "$sup" || rc=$?
t1=$(date +%s.%N)
[ "$rc" -eq 0 ] || { tail -30 "$work/elastic.log" >&2; echo "[soak] examoe-elastic exited $rc" >&2; exit 1; }

python3 - "$work" "$t0" "$t1" "$MEMORY_EVERY" <<'PY'
import json, sys
work, t0, t1, tier0_every = sys.argv[1], float(sys.argv[2]), float(sys.argv[3]), sys.argv[4]
def steps(path):
    return [r for r in map(json.loads, open(path)) if "loss" in r]
def step_s(r):
    t = r["time"]
    return t["compute"] + t["comm_exposed"] + t["io"] + t["eval"]
ref = {r["step"]: r["loss"] for r in steps(f"{work}/reference/metrics.jsonl")}
run = steps(f"{work}/elastic/metrics.jsonl")
records = [json.loads(l) for l in open(f"{work}/elastic/elastic.jsonl")] if run else []
restarts = [r for r in records if r.get("event") != "grow"]
grows = [r for r in records if r.get("event") == "grow"]
kept = {}
for r in run:  # a step done again after a resume replaces the lost one
    kept[r["step"]] = r
rel = {s: abs(r["loss"] - ref[s]) / abs(ref[s]) for s, r in kept.items()}
same = kept.keys() == ref.keys() and max(rel.values()) <= 1e-5
down = [r["downtime_s"] for r in restarts if r.get("downtime_s") is not None]  # failures only
wall = t1 - t0
print(json.dumps({
    "event": "soak", "failures": len(restarts),
    "grows": len(grows),
    "world_sizes": [records[0]["old_ranks"]] + [r["new_ranks"] for r in records] if records else [],
    "steps_lost": sum(r["lost_steps"] or 0 for r in records),
    "tier0_every": int(tier0_every),
    "useful_step_s": round(sum(step_s(r) for r in kept.values()), 3), "wall_s": round(wall, 3),
    "effective_training_time": round(sum(step_s(r) for r in kept.values()) / wall, 4),
    "mean_downtime_s": round(sum(down) / len(down), 3) if down else None,
    "losses_equal_uninterrupted": same, "max_rel_loss_diff": max(rel.values()),
    "final_loss": kept[max(kept)]["loss"], "reference_final_loss": ref[max(ref)]}))
PY
