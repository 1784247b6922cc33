#!/usr/bin/env bash
# scripts/batch/slurm-cpu.sbatch on a real Slurm (Debian's slurm-wlm, a
# single-node cluster on localhost started here): a 2-task job gets
# `scancel --signal=USR1` mid-run (to the ranks) and then a second SIGUSR1
# through the batch script (`scancel --batch`, the route of
# `--signal=B:USR1@120`) while it stops; it writes a checkpoint, exits with
# 75, requeues itself, resumes from the checkpoint, and its losses continue
# the uninterrupted run's exactly.
#
#   slurm_requeue.sh EXAMOE MPIEXEC SOURCE_DIR WORK [examoe options...]
#
# Needs root (the daemons, apt); exits 77 (skipped) without it, or when
# Slurm cannot be installed or started here.
set -uo pipefail
exe=$1 mpiexec=$2 src=$3 work=$4
shift 4
here=$(cd "$(dirname "$0")" && pwd)
skip() { echo "SKIP: $*"; exit 77; }
fail() {
  echo "FAIL: $*" >&2
  for f in "$work"/*.log "$work"/job.out "$work"/cluster/log/*.log; do
    [ -f "$f" ] && { echo "--- $f"; tail -n 60 "$f"; }
  done >&2
  exit 1
}

[ "$(id -u)" -eq 0 ] || skip "needs root to install Slurm and start its daemons"
if ! command -v slurmctld >/dev/null || ! command -v munged >/dev/null; then
  "$src/scripts/deps-debian.sh" slurm-wlm munge || skip "could not install Debian's slurm-wlm and munge"
fi
rm -rf "$work"
mkdir -p "$work"
# shellcheck source=slurm_cluster.sh
source "$here/slurm_cluster.sh"
trap slurm_cluster_stop EXIT
slurm_cluster_start "$work/cluster" || skip "could not start a Slurm cluster here: $(tail -n 5 "$work"/cluster/log/*.log 2>/dev/null)"
echo "Slurm $(sinfo --version | cut -d' ' -f2): single-node cluster up ($(sinfo -h -o '%P %D node %c CPUs %t'))"

steps=80
common=("$@" --set train.steps=$steps --set checkpoint.every=0 --set resilience.timeout_s=60)
deck=$src/input/tiny.toml
"$mpiexec" -n 2 "$exe" "$deck" "${common[@]}" --set output.run_dir="$work/ref" >"$work/ref.log" 2>&1 ||
  fail "the uninterrupted run failed"

# Debian's MPICH speaks PMI-1/2: srun's pmi2 plugin serves both.
# The job's steps sleep 50 ms each (EXAMOE_FAULT_STEP_DELAY_S, exported to
# the ranks), so that the signal lands before a fast machine finishes.
job=$(SLURM_MPI_TYPE=pmi2 EXAMOE="$exe" EXAMOE_FAULT_STEP_DELAY_S=0.05 sbatch --parsable --chdir="$work" --output="$work/job.out" \
        --ntasks=2 --nodes=1 "$src/scripts/batch/slurm-cpu.sbatch" "$deck" "${common[@]}" \
        --set output.run_dir="$work/run") || fail "sbatch failed"
echo "submitted job $job"

deadline=$((SECONDS + 300))
until grep -q '"loss"' "$work/run/metrics.jsonl" 2>/dev/null; do
  [ "$SECONDS" -lt "$deadline" ] || fail "job $job wrote no step record in 300 s"
  state=$(squeue -h -j "$job" -o %T 2>/dev/null)
  case "$state" in PENDING|CONFIGURING|RUNNING|"") ;; *) fail "job $job is $state before its first step";; esac
  sleep 0.05
done
scancel --signal=USR1 "$job" || fail "scancel --signal=USR1 failed"
echo "sent SIGUSR1 to the job's ranks (scancel --signal=USR1 $job)"
sleep 0.1
scancel --batch --signal=USR1 "$job" && echo "sent a second SIGUSR1 through the batch script (scancel --batch)"

# Requeued (Restarts=1), then ran to the end.
until scontrol show job "$job" 2>/dev/null | grep -q "JobState=COMPLETED"; do
  [ "$SECONDS" -lt "$deadline" ] || fail "job $job did not complete within 300 s: $(scontrol show job "$job")"
  scontrol show job "$job" 2>/dev/null | grep -qE "JobState=(FAILED|CANCELLED|TIMEOUT|NODE_FAIL)" &&
    fail "job $job ended badly: $(scontrol show job "$job" | grep JobState)"
  sleep 0.5
done
restarts=$(scontrol show job "$job" | sed -n 's/.*Restarts=\([0-9]*\).*/\1/p')
echo "--- job output"
cat "$work/job.out"
echo "---"
[ "$restarts" = 1 ] || fail "job $job was restarted $restarts times, not once"
grep -q "examoe exited with 75" "$work/job.out" || fail "the first run did not exit with 75"
grep -q "requeueing job $job" "$work/job.out" || fail "the batch script did not requeue the job"
step=$(sed -n 's/.*stopped at step \([0-9]*\) of.*/\1/p' "$work/job.out" | head -1)
[ -n "$step" ] || fail "no 'stopped at step' message"
[ "$step" -lt "$steps" ] || fail "the signal came too late: the run had finished ($step of $steps)"
ckpt=$(printf 'step_%08d' "$step")
[ -f "$work/run/ckpt/$ckpt/state.h5" ] || fail "no checkpoint $ckpt for the stop at step $step"
grep -q "checkpoint: resumed from .*$ckpt at step $step" "$work/job.out" || fail "the requeued run did not resume from $ckpt"
grep -q "job $job restart 1" "$work/job.out" || fail "no second start of the batch script"
cmake -DREF="$work/ref/metrics.jsonl" -DRUN="$work/run/metrics.jsonl" -P "$src/tests/train/same_losses.cmake" ||
  fail "losses differ"
echo "job $job: stopped at step $step of $steps by SIGUSR1, checkpoint $ckpt, requeued once, resumed; losses identical"
