#!/usr/bin/env bash
# End to end, without a scheduler: a 2-rank run whose rank 1 alone gets
# SIGUSR1 mid-run stops on both ranks after the same step, writes a
# checkpoint and exits with 75; more signals (USR1 and TERM to both ranks)
# while it stops change nothing. checkpoint.resume = true then continues
# it, and the two halves' losses are the uninterrupted run's exactly.
# The same through a real Slurm (scancel, requeue): tests/batch/slurm_requeue.sh.
#
#   stop_signal.sh EXAMOE MPIEXEC DECK WORK [examoe options...]
set -euo pipefail
exe=$1 mpiexec=$2 deck=$3 work=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; for f in "$work"/*.log; do echo "--- $f"; cat "$f"; done >&2; exit 1; }

# The signal is sent after the first step record; each step takes
# milliseconds, so the signalled run is slowed down (below).
common=("$deck" "$@" --set train.steps=80 --set checkpoint.every=0 --set resilience.timeout_s=60)
"$mpiexec" -n 2 "$exe" "${common[@]}" --set output.run_dir="$work/ref" >"$work/ref.log" 2>&1 ||
  fail "the uninterrupted run failed"

# The signalled run sleeps 50 ms after each step, so that it is still going
# when the signal lands however fast the machine (the losses do not change).
EXAMOE_FAULT_STEP_DELAY_S=0.05 "$mpiexec" -n 2 "$exe" "${common[@]}" --set output.run_dir="$work/run" \
  >"$work/run.log" 2>&1 &
job=$!
pid_of() { sed -n 's/^pid=//p' "$work/run/.heartbeat/rank-$1" 2>/dev/null; }
deadline=$((SECONDS + 120))
until [ -n "$(pid_of 1)" ] && grep -q '"loss"' "$work/run/metrics.jsonl" 2>/dev/null; do
  kill -0 "$job" 2>/dev/null || fail "the run ended before it could be signalled"
  [ "$SECONDS" -lt "$deadline" ] || fail "no step record and heartbeat after 120 s"
  sleep 0.02
done
r0=$(pid_of 0) r1=$(pid_of 1)
kill -USR1 "$r1"
echo "sent SIGUSR1 to rank 1 (pid $r1) only"
# Later signals, to both ranks, while they agree, log and write the checkpoint.
for sig in USR1 TERM USR1 TERM; do
  sleep 0.05
  kill -s "$sig" "$r0" "$r1" 2>/dev/null || break  # (they may have exited already)
done
rc=0
wait "$job" || rc=$?
[ "$rc" -eq 75 ] || fail "the signalled run exited with $rc, not 75"
grep -q "stopped at step" "$work/run.log" || fail "no 'stopped at step' message"
grep "stopped at step" "$work/run.log"
step=$(sed -n 's/.*stopped at step \([0-9]*\) of.*/\1/p' "$work/run.log" | head -1)
ckpt=$(printf '%s/run/ckpt/step_%08d' "$work" "$step")
[ -f "$ckpt/state.h5" ] || fail "no checkpoint $ckpt/state.h5 for the stop at step $step"
[ "$(readlink "$work/run/ckpt/latest")" = "$(basename "$ckpt")" ] || fail "latest does not name $ckpt"
if ls -a "$work/run/ckpt" | grep -q '^\.step_'; then fail "a half-written checkpoint was left: $(ls -a "$work/run/ckpt")"; fi

"$mpiexec" -n 2 "$exe" "${common[@]}" --set output.run_dir="$work/run" --set checkpoint.resume=true \
  >"$work/resume.log" 2>&1 || fail "the resumed run failed"
grep "resumed from" "$work/resume.log" || fail "the resumed run did not load the checkpoint"
cmake -DREF="$work/ref/metrics.jsonl" -DRUN="$work/run/metrics.jsonl" -P "$here/same_losses.cmake" ||
  fail "losses differ"
echo "stopped at step $step of 80 on a signal to one rank; resumed; losses identical"
