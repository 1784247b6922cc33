#!/usr/bin/env bash
# A federated run (2 sites of one rank) whose site 1 alone gets SIGUSR1
# mid-run: both sites stop at the same round's end, after its average, each
# writing a checkpoint of that step, and the run exits with 75. Resumed
# (checkpoint.resume = true), every site's losses are the uninterrupted
# run's exactly. A per-step agreement could not work here: with
# federated.balance the sites step at different times, so the sites agree
# at round ends (train/federated.cpp).
#
#   federated_stop.sh EXAMOE MPIEXEC DECK WORK SITE_DATA [examoe options...]
set -euo pipefail
exe=$1 mpiexec=$2 deck=$3 work=$4 sites=$5
shift 5
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; for f in "$work"/*.log; do echo "--- $f"; cat "$f"; done >&2; exit 1; }

common=("$deck" "$@" --set train.steps=40 --set checkpoint.every=0 --set resilience.timeout_s=60
        --set federated.sites=2 --set federated.local_steps=4 --set "federated.site_data=$sites")
"$mpiexec" -n 2 "$exe" "${common[@]}" --set output.run_dir="$work/ref" >"$work/ref.log" 2>&1 ||
  fail "the uninterrupted run failed"

EXAMOE_FAULT_STEP_DELAY_S=0.05 "$mpiexec" -n 2 "$exe" "${common[@]}" --set output.run_dir="$work/run" \
  >"$work/run.log" 2>&1 &
job=$!
pid_of() { sed -n 's/^pid=//p' "$work/run/site$1/.heartbeat/rank-0" 2>/dev/null; }
deadline=$((SECONDS + 120))
until [ -n "$(pid_of 1)" ] && grep -q '"loss"' "$work/run/site1/metrics.jsonl" 2>/dev/null; do
  kill -0 "$job" 2>/dev/null || fail "the run ended before it could be signalled"
  [ "$SECONDS" -lt "$deadline" ] || fail "no step record and heartbeat after 120 s"
  sleep 0.02
done
kill -USR1 "$(pid_of 1)"
echo "sent SIGUSR1 to site 1's rank (pid $(pid_of 1)) only"
rc=0
wait "$job" || rc=$?
[ "$rc" -eq 75 ] || fail "the signalled run exited with $rc, not 75"
step=$(sed -n 's/.*stopped at step \([0-9]*\) of.*/\1/p' "$work/run.log" | head -1)
[ -n "$step" ] || fail "no 'stopped at step' message"
[ $((step % 4)) -eq 0 ] || fail "stopped at step $step, not at a round's end (rounds of 4)"
[ "$step" -lt 40 ] || fail "the run was not stopped early (step $step)"
for k in 0 1; do
  ckpt=$(printf '%s/run/site%d/ckpt/step_%08d' "$work" "$k" "$step")
  [ -f "$ckpt/state.h5" ] || fail "site $k has no checkpoint $ckpt for the stop at step $step"
done

"$mpiexec" -n 2 "$exe" "${common[@]}" --set output.run_dir="$work/run" --set checkpoint.resume=true \
  >"$work/resume.log" 2>&1 || fail "the resumed run failed"
for k in 0 1; do
  cmake -DREF="$work/ref/site$k/metrics.jsonl" -DRUN="$work/run/site$k/metrics.jsonl" -P "$here/same_losses.cmake" ||
    fail "site $k's losses differ"
done
echo "both sites stopped at step $step (a round's end) on a signal to site 1; resumed; every site's losses identical"
