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
#   --grow-after-steps s grows a shrunk job back after s steps),
#   MTBF_S=m (failures at exponentially distributed times of mean m seconds
#   of running, counted from the first step or the last resume, until the
#   job ends or N of them, default then 1000; SPARES defaults to N so that
#   each failure relaunches on NP ranks, the reliability model's setting),
#   SPARES=k (examoe-elastic --spares k; default 0 without MTBF_S).
#
# A killed rank's node memory is lost with it: the tier-0 segments it kept
# are removed right after the kill (its buddy's copies elsewhere survive).
#
# Reports one JSON line: the steps lost beyond the last checkpoint (from the
# restart records), the effective training time (the step times of the steps
# that count, from metrics.jsonl, over the supervisor's wall time), the mean
# downtime per failure (job death to resumed) and the restart cost (kill to
# resumed: detection too), what the reliability model needs
# (scripts/reliability-check.sh: the uninterrupted run's wall time, useful
# step time and checkpoint time, and the steps between checkpoints), and
# whether every step's loss
# equals the uninterrupted run's (1e-5 relative), and the largest relative
# difference. (MoE routing is discontinuous: over many steps, runs in two
# layouts may part by more than 1e-5 even uninterrupted, when the last-bit
# differences of their reduction orders flip a near-tie in the router.)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
MTBF_S=${MTBF_S:-}
failures=$([ -n "$MTBF_S" ] && echo 1000 || echo 3)
[[ "${1:-}" =~ ^[0-9]+$ ]] && { failures=$1; shift; }
SPARES=${SPARES:-$([ -n "$MTBF_S" ] && echo "$failures" || echo 0)}
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
trap 'rm -rf "$shm" "$shm-reference"' EXIT
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1

usec() { echo "${EPOCHREALTIME/./}"; }
count() { local n; n=$(grep -c "$1" "$2" 2>/dev/null) || true; echo "${n:-0}"; }
# When the job (pid $1) logged its first step in run directory $2: the
# spans measured from there leave out the launch.
first_step_at() {
  while kill -0 "$1" 2>/dev/null && [ "$(count '"loss"' "$2/metrics.jsonl")" -lt 1 ]; do sleep 0.02; done
  usec
}

echo "[soak] uninterrupted reference on $NP ranks"
# (with the same checkpoints, for their cost, in a memory directory of its own)
"$MPIEXEC" -n "$NP" "$BUILD/bin/examoe" "${deck[@]}" "${tier0[@]}" --set checkpoint.memory_dir="$shm-reference" \
  --set output.run_dir="$work/reference" >"$work/reference.log" 2>&1 &
ref=$!
r_first=$(first_step_at "$ref" "$work/reference")
wait "$ref" || { tail -20 "$work/reference.log" >&2; exit 1; }
r_end=$(usec)

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
steps_logged() { count '"loss"' "$work/elastic/metrics.jsonl"; }
resumes() { grep -v '"grow"' "$work/elastic/elastic.jsonl" 2>/dev/null | grep -c '"resumed_step":[0-9]' || true; }
# MTBF_S: the running time before each failure, drawn up front from SEED.
gaps=()
[ -n "$MTBF_S" ] && read -ra gaps < <(python3 -c "import random, sys; r = random.Random($RANDOM)
print(' '.join(str(int(r.expovariate(1 / $MTBF_S) * 1e6)) for _ in range($failures)))")
: >"$work/restarts.txt"  # per failure: the kill and the resume, in microseconds
if [ -n "$MTBF_S" ]; then
  echo "[soak] failures every $MTBF_S s of running on average (at most $failures) under examoe-elastic --spares $SPARES (log: $work/elastic.log)"
else
  echo "[soak] $failures failures under examoe-elastic (log: $work/elastic.log)"
fi
t0=$(usec)
"$BUILD/bin/examoe-elastic" --ranks "$NP" --spares "$SPARES" --max-restarts $((2 * failures + 10)) "${grow[@]}" \
  --mpiexec "$MPIEXEC" "${deck[@]}" "${tier0[@]}" \
  --set output.run_dir="$work/elastic" >"$work/elastic.log" 2>&1 &
sup=$!
t_first=$(first_step_at "$sup" "$work/elastic")
up=$t_first
for i in $(seq 1 "$failures"); do
  if [ -n "$MTBF_S" ]; then
    # Running since the first step (the first failure) or the last resume.
    due=$(( up + gaps[i - 1] ))
    while kill -0 "$sup" 2>/dev/null && [ "$(usec)" -lt "$due" ]; do sleep 0.02; done
  else
    # At a random time after the job logged a few new steps.
    target=$(( $(steps_logged) + 1 + RANDOM % 4 ))
    while kill -0 "$sup" 2>/dev/null && [ "$(steps_logged)" -lt "$target" ]; do sleep 0.2; done
    sleep "0.$((RANDOM % 10))"
  fi
  mapfile -t ranks < <(ranks_of "$sup")
  # Between two launches (a grow) there is no rank to kill yet.
  while kill -0 "$sup" 2>/dev/null && [ "${#ranks[@]}" -eq 0 ]; do sleep 0.2; mapfile -t ranks < <(ranks_of "$sup"); done
  if [ "${#ranks[@]}" -eq 0 ]; then echo "[soak] the job ended before failure $i"; break; fi
  victim=${ranks[RANDOM % ${#ranks[@]}]}
  # (the victim may have ended since: then there is no rank to name)
  rank=$( { tr '\0' '\n' <"/proc/$victim/environ"; } 2>/dev/null | sed -n 's/^PMI_RANK=//p') || rank=""
  echo "[soak] failure $i: kill -9 examoe pid $victim (rank ${rank:-?} of ${#ranks[@]}) after $(steps_logged) step records"
  killed=$(usec)
  kill -9 "$victim" 2>/dev/null || true
  [ -n "$rank" ] && rm -f "$shm"/examoe-t0-*-h"$rank"
  # Until the relaunched job says where it resumed.
  while kill -0 "$sup" 2>/dev/null && [ "$(resumes)" -lt "$i" ]; do sleep 0.02; done
  # Running again once it logs a step: the restart cost ends there.
  size=$(stat -c %s "$work/elastic/metrics.jsonl")
  while kill -0 "$sup" 2>/dev/null && [ "$(stat -c %s "$work/elastic/metrics.jsonl")" -le "$size" ]; do sleep 0.02; done
  up=$(usec)
  [ "$(resumes)" -ge "$i" ] && echo "$killed $up" >>"$work/restarts.txt"
done
rc=0
wait "$sup" || rc=$?
t_end=$(usec)
[ "$rc" -eq 0 ] || { tail -30 "$work/elastic.log" >&2; echo "[soak] examoe-elastic exited $rc" >&2; exit 1; }

python3 - "$work" "$MEMORY_EVERY" "$t0" "$r_first" "$r_end" "$t_first" "$t_end" <<'PY'
import json, os, sys
work, tier0_every = sys.argv[1], sys.argv[2]
# (microseconds) the wall time, and the spans from the end of step 1
wall, ref_span, span = [(int(sys.argv[j]) - int(sys.argv[i])) / 1e6 for i, j in ((3, 7), (4, 5), (6, 7))]
def steps(path):
    return [r for r in map(json.loads, open(path)) if "loss" in r]
def train_s(r):  # the step's training work
    t = r["time"]
    return t["compute"] + t["comm_exposed"] + t["eval"]
def step_s(r):
    return train_s(r) + r["time"]["io"]
ref_steps = steps(f"{work}/reference/metrics.jsonl")
ckpt = json.loads(open(f"{work}/reference/metrics.jsonl").readline())["config"]["checkpoint"]
every = min([k for k in (ckpt["every"], ckpt["local_every"], ckpt["memory_every"]) if k > 0] or [0])
restart = [(int(b) - int(a)) / 1e6 for a, b in (l.split() for l in open(f"{work}/restarts.txt"))]
ref = {r["step"]: r["loss"] for r in ref_steps}
run = steps(f"{work}/elastic/metrics.jsonl")
log = f"{work}/elastic/elastic.jsonl"  # (none when the job ended before a failure)
records = [json.loads(l) for l in open(log)] if os.path.exists(log) else []
restarts = [r for r in records if r.get("event") != "grow"]
grows = [r for r in records if r.get("event") == "grow"]
kept = {}
for r in run:  # a step done again after a resume replaces the lost one
    kept[r["step"]] = r
rel = {s: abs(r["loss"] - ref[s]) / abs(ref[s]) for s, r in kept.items()}
same = kept.keys() == ref.keys() and max(rel.values()) <= 1e-5
down = [r["downtime_s"] for r in restarts if r.get("downtime_s") is not None]  # failures only
print(json.dumps({
    "event": "soak", "failures": len(restarts),
    "grows": len(grows),
    "world_sizes": [records[0]["old_ranks"]] + [r["new_ranks"] for r in records] if records else [],
    "steps_lost": sum(r["lost_steps"] or 0 for r in records),
    "tier0_every": int(tier0_every),
    "useful_step_s": round(sum(step_s(r) for r in kept.values()), 3), "wall_s": round(wall, 3),
    "effective_training_time": round(sum(step_s(r) for r in kept.values()) / wall, 4),
    "mean_downtime_s": round(sum(down) / len(down), 3) if down else None,
    "restart_s": round(sum(restart) / len(restart), 3) if restart else None,
    # From the end of step 1 (the first step logged) to the job's end.
    "span_s": round(span, 3), "training_s": round(sum(train_s(r) for s, r in kept.items() if s > 1), 3),
    "reference": {"span_s": round(ref_span, 3),
                  "training_s": round(sum(train_s(r) for r in ref_steps[1:]), 3),
                  "checkpoint_io_s": round(sum(r["time"]["io"] for r in ref_steps[1:]), 3),
                  "steps": len(ref_steps), "checkpoint_every_steps": every},
    "losses_equal_uninterrupted": same, "max_rel_loss_diff": max(rel.values()),
    "final_loss": kept[max(kept)]["loss"], "reference_final_loss": ref[max(ref)]}))
PY
