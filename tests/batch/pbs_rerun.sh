#!/usr/bin/env bash
# scripts/batch/pbs-cpu.pbs in a fake PBS environment (PBS_JOBID, a
# PBS_NODEFILE of two local ranks, PBS_O_WORKDIR, a qrerun that records its
# call), run again by the test wherever PBS would rerun the job:
#   1. SIGTERM to the batch script alone (qsig's route) stops the 2-rank run
#      with a checkpoint, and the script asks for the rerun (qrerun JOB);
#   2. the rerun resumes from that checkpoint; SIGTERM to every process of
#      the job, the ranks included (how PBS ends it at qdel or the walltime:
#      mpiexec gets it too, and may then report 0 for ranks that exited 75),
#      stops it again, and the script asks for the rerun again;
#   3. the second rerun (EXAMOE relative to PBS_O_WORKDIR, started from
#      elsewhere) resumes and finishes without asking for one, and the
#      losses are the uninterrupted run's exactly;
#   4. a rank killed by SIGKILL (fault injection), with a checkpoint to
#      resume from, ends the job with a status other than 0 and 75 and no
#      rerun (the script's policy: see its header);
#   5. an EXAMOE or deck path that is relative to the caller's directory, not
#      to PBS_O_WORKDIR, is refused with an error naming it.
# The signalled runs hold after a given step until their signal has come
# (EXAMOE_FAULT_HOLD_AFTER_STEP), so the signal always lands in the run, and
# it stops after the next step, however loaded the machine.
#
#   pbs_rerun.sh EXAMOE MPIEXEC SOURCE_DIR WORK [examoe options...]
set -uo pipefail
if [ $# -lt 4 ]; then
  echo "usage: $0 EXAMOE MPIEXEC SOURCE_DIR WORK [examoe options...]" >&2
  exit 2
fi
# The batch script runs in PBS_O_WORKDIR: what it is given must not depend
# on the directory this test was started in.
abs() { case $1 in /*) printf '%s\n' "$1" ;; *) printf '%s\n' "$PWD/$1" ;; esac; }
exe=$(command -v -- "$1") || { echo "FAIL: EXAMOE $1 is not an executable" >&2; exit 1; }
mpiexec=$(command -v -- "$2") || { echo "FAIL: MPIEXEC $2 is not an executable" >&2; exit 1; }
exe=$(abs "$exe") mpiexec=$(abs "$mpiexec") src=$(abs "$3") work=$(abs "$4")
shift 4
script=$src/scripts/batch/pbs-cpu.pbs
deck=$src/input/tiny.toml
[ -r "$script" ] && [ -r "$deck" ] || { echo "FAIL: no $script or $deck: is $src the source tree?" >&2; exit 1; }

# The processes below PID, depth first.
descendants() {
  local p
  for p in $(ps -o pid= --ppid "$1"); do
    echo "$p"
    descendants "$p"
  done
}
live=""  # the signalled job's session leader while it runs
fail() {
  echo "FAIL: $*" >&2
  if [ -n "$live" ]; then
    # shellcheck disable=SC2046  # pid lists
    kill -KILL "$live" $(descendants "$live") 2>/dev/null
  fi
  for f in "$work"/*.out "$work"/*.log "$work"/qrerun.calls; do
    [ -f "$f" ] && { echo "--- $f"; tail -n 40 "$f"; }
  done >&2
  exit 1
}
rm -rf "$work"
mkdir -p "$work/bin"

# The fake PBS: qrerun only records its arguments (PBS would end the job
# and start it again: the test does the second part); mpiexec is the one
# ExaMoE was built with.
# (A wrapper, not a link: Hydra looks for its proxy next to the path it was
# started by.)
cat >"$work/bin/qrerun" <<EOF
#!/bin/sh
echo "\$*" >>"$work/qrerun.calls"
EOF
printf '#!/bin/sh\nexec %q "$@"\n' "$mpiexec" >"$work/bin/mpiexec"
chmod +x "$work/bin/qrerun" "$work/bin/mpiexec"
printf 'localhost\nlocalhost\n' >"$work/nodefile"
job=4242.pbs-test
pbs=(env PATH="$work/bin:$PATH" EXAMOE="$exe" PBS_JOBID=$job PBS_NODEFILE="$work/nodefile" PBS_O_WORKDIR="$work")
calls() { [ -f "$work/qrerun.calls" ] && wc -l <"$work/qrerun.calls" || echo 0; }

steps=40
common=("$@" --set train.steps=$steps --set checkpoint.every=0 --set resilience.timeout_s=60)
"$mpiexec" -n 2 "$exe" "$deck" "${common[@]}" --set output.run_dir="$work/ref" >"$work/ref.log" 2>&1 ||
  fail "the uninterrupted run failed"

# run_signalled N HOLD HOW: job run N in a session of its own (as PBS runs a
# job), its ranks holding after step HOLD until they get a stop signal; on
# seeing step HOLD logged, SIGTERM to the script (HOW = script) or to the
# script and every process below it (HOW = job: Hydra's proxy and the ranks
# start sessions of their own, so the session's processes are not all).
# Sets $stop, the step it stopped at.
run_signalled() {
  local n=$1 hold=$2 how=$3 out=$work/job$1.out bg sid rc pids ranks deadline=$((SECONDS + 120))
  setsid -w bash -c 'echo $$ >"$0"; exec "$@"' "$work/job$n.sid" "${pbs[@]}" EXAMOE_FAULT_HOLD_AFTER_STEP="$hold" \
    bash "$script" "$deck" "${common[@]}" --set output.run_dir="$work/run" >"$out" 2>&1 &
  bg=$!
  until [ -s "$work/job$n.sid" ] && grep -qE "^step +$hold/" "$out"; do
    kill -0 "$bg" 2>/dev/null || fail "run $n ended before it could be signalled"
    [ "$SECONDS" -lt "$deadline" ] || fail "run $n did not log step $hold in 120 s"
    sleep 0.05
  done
  sid=$(cat "$work/job$n.sid")
  live=$sid
  if [ "$how" = script ]; then
    kill -TERM "$sid"
  else
    pids=$(descendants "$sid")
    ranks=$(ps -o comm= -p "$(echo $pids | tr ' ' ,)" | grep -cx examoe)
    [ "$ranks" -eq 2 ] || fail "run $n: $ranks examoe processes below the batch script, not 2"
    # shellcheck disable=SC2086  # a pid list
    kill -TERM "$sid" $pids
  fi
  wait "$bg"
  rc=$?
  live=""
  echo "--- run $n (SIGTERM to the $how after step $hold)"
  cat "$out"
  [ "$rc" -eq 0 ] || fail "run $n: the batch script exited with $rc, not 0 (qrerun accepted)"
  grep -q "got SIGTERM" "$out" || fail "run $n: the batch script did not get the SIGTERM"
  grep -q "asking PBS to rerun job $job" "$out" || fail "run $n: the batch script did not ask for the rerun"
  [ "$(calls)" -eq "$n" ] || fail "run $n: qrerun was called $(calls) times in all, not $n"
  [ "$(sed -n "${n}p" "$work/qrerun.calls")" = "$job" ] || fail "run $n: qrerun was not called with the job id $job"
  stop=$(sed -n 's/.*stopped at step \([0-9]*\) of.*/\1/p' "$out" | head -1)
  [ -n "$stop" ] || fail "run $n: no 'stopped at step' line"
  [ "$stop" -eq $((hold + 1)) ] || fail "run $n: stopped at step $stop, not after the step after the hold ($((hold + 1)))"
  [ -f "$work/run/ckpt/$(printf 'step_%08d' "$stop")/state.h5" ] || fail "run $n: no checkpoint for step $stop"
}

run_signalled 1 3 script
first=$stop
run_signalled 2 $((first + 3)) job
grep -q "checkpoint: resumed from .*$(printf 'step_%08d' "$first") at step $first" "$work/job2.out" ||
  fail "run 2 did not resume from run 1's checkpoint (step $first)"
second=$stop

# A relative EXAMOE is taken from PBS_O_WORKDIR, not from where the job
# was started (at qsub they are the same directory).
ln -s "$exe" "$work/examoe"
(cd / && "${pbs[@]}" EXAMOE=./examoe bash "$script" "$deck" "${common[@]}" --set output.run_dir="$work/run") \
  >"$work/job3.out" 2>&1 || fail "run 3 (the second rerun) exited with $?"
grep -q "checkpoint: resumed from .*$(printf 'step_%08d' "$second") at step $second" "$work/job3.out" ||
  fail "run 3 did not resume from run 2's checkpoint (step $second)"
grep -qE "^step +$steps/$steps " "$work/job3.out" ||
  fail "run 3 did not log its last step $steps"
[ "$(calls)" -eq 2 ] || fail "the finished run asked for a rerun"
cmake -DREF="$work/ref/metrics.jsonl" -DRUN="$work/run/metrics.jsonl" -P "$src/tests/train/same_losses.cmake" ||
  fail "losses differ from the uninterrupted run's"
rm -f "$work/examoe"  # case 5 needs ./examoe to be missing from the job's directory

# 4. Rank 1 dies by SIGKILL after step 3; step 2's checkpoint is there.
"${pbs[@]}" EXAMOE_FAULT_EXIT_AFTER_STEP=3 EXAMOE_FAULT_RANK=1 EXAMOE_FAULT_SIGNAL=9 \
  bash "$script" "$deck" "$@" --set train.steps=8 --set checkpoint.every=2 --set resilience.timeout_s=60 \
  --set output.run_dir="$work/killed" >"$work/job4.out" 2>&1
rc=$?
echo "--- run 4 (rank 1 killed by SIGKILL)"
cat "$work/job4.out"
grep -q "EXAMOE_FAULT_EXIT_AFTER_STEP=3: rank 1 exiting abruptly" "$work/job4.out" || fail "the fault did not fire"
[ -f "$work/killed/ckpt/step_00000002/state.h5" ] || fail "no step-2 checkpoint before the fault"
grep -q "stopped at step" "$work/job4.out" && fail "the killed rank's job logged a stop with a checkpoint"
[ "$rc" -ne 0 ] && [ "$rc" -ne 75 ] || fail "a killed rank's job exited with $rc"
grep -q "not asking PBS to rerun" "$work/job4.out" || fail "the batch script did not say why it does not rerun"
[ "$(calls)" -eq 2 ] || fail "qrerun was called for the killed rank's job"

# 5. Paths relative to the caller's directory, which is not PBS_O_WORKDIR.
(cd "$(dirname "$exe")" && "${pbs[@]}" EXAMOE="./$(basename "$exe")" bash "$script" "$deck") >"$work/job5.out" 2>&1
r5=$?
cat "$work/job5.out"
[ "$r5" -eq 2 ] || fail "a relative EXAMOE missing from PBS_O_WORKDIR: exit $r5, not 2"
grep -q "EXAMOE=./$(basename "$exe") is not an executable file (in $work, the job's directory)" "$work/job5.out" ||
  fail "no error naming the relative EXAMOE and the job's directory"
(cd "$src" && "${pbs[@]}" bash "$script" input/tiny.toml) >"$work/job6.out" 2>&1
r6=$?
cat "$work/job6.out"
[ "$r6" -eq 2 ] || fail "a relative deck missing from PBS_O_WORKDIR: exit $r6, not 2"
grep -q "cannot read the deck input/tiny.toml (in $work, the job's directory)" "$work/job6.out" ||
  fail "no error naming the relative deck and the job's directory"
[ "$(calls)" -eq 2 ] || fail "qrerun was called for a job that could not start"
echo "stopped at step $first (SIGTERM to the script) and $second (to the job), rerun twice, resumed;" \
     "losses identical; a killed rank's job exited $rc without a rerun; relative paths outside" \
     "PBS_O_WORKDIR refused"
