#!/usr/bin/env bash
# The batch scripts parse (bash -n) and, in their dry-run mode
# (EXAMOE_DRY_RUN=1), build the launch they would run from a scheduler's
# environment: ranks from the allocation, OMP_* from cpus per task, the
# resume flag, one GPU per local rank (slurm-gpu), ranks and nodes from
# $PBS_NODEFILE (pbs-cpu; PBS is not in Debian, so this is its only test).
#
#   dry_run.sh SOURCE_DIR WORK
set -euo pipefail
src=$1 work=$2
dir=$src/scripts/batch
rm -rf "$work"
mkdir -p "$work"
fail() { echo "FAIL: $*" >&2; exit 1; }
expect() {  # expect OUTPUT-FILE REGEX WHAT
  grep -qE -- "$2" "$1" || { cat "$1" >&2; fail "$3: no line matching '$2'"; }
}
for f in "$dir"/slurm-cpu.sbatch "$dir"/slurm-gpu.sbatch "$dir"/pbs-cpu.pbs; do
  bash -n "$f" || fail "$f does not parse"
  bash "$f" >"$work/usage.out" 2>&1 && fail "$f ran without a deck"
  expect "$work/usage.out" "usage:" "$(basename "$f") without a deck"
done
unset OMP_NUM_THREADS OMP_PROC_BIND OMP_PLACES CUDA_VISIBLE_DEVICES

out=$work/slurm-cpu.out
env EXAMOE_DRY_RUN=1 EXAMOE=/opt/examoe/bin/examoe SLURM_JOB_ID=41 SLURM_NNODES=2 SLURM_NTASKS=8 \
    SLURM_NTASKS_PER_NODE="4(x2)" SLURM_CPUS_PER_TASK=14 SLURM_RESTART_COUNT=3 \
    bash "$dir/slurm-cpu.sbatch" deck.toml --set train.steps=9 >"$out"
cat "$out"
expect "$out" "job 41 restart 3: 2 node\(s\) x 4\(x2\) rank\(s\), OMP_NUM_THREADS=14 OMP_PROC_BIND=spread OMP_PLACES=threads" "slurm-cpu"
expect "$out" "^\[examoe-batch\] srun --cpus-per-task=14 /opt/examoe/bin/examoe deck.toml --set train.steps=9 --set checkpoint.resume=true$" "slurm-cpu srun"
env EXAMOE_DRY_RUN=1 EXAMOE_LAUNCHER=mpiexec SLURM_NTASKS=8 OMP_NUM_THREADS=3 OMP_PROC_BIND=close \
    bash "$dir/slurm-cpu.sbatch" deck.toml >"$out"
expect "$out" "OMP_NUM_THREADS=3 OMP_PROC_BIND=close" "slurm-cpu keeps the caller's OMP_*"
expect "$out" "^\[examoe-batch\] mpiexec -n 8 examoe deck.toml --set checkpoint.resume=true$" "slurm-cpu mpiexec"
env EXAMOE_DRY_RUN=1 EXAMOE_LAUNCHER=aprun bash "$dir/slurm-cpu.sbatch" deck.toml >"$out" 2>&1 &&
  fail "slurm-cpu accepted EXAMOE_LAUNCHER=aprun"
expect "$out" "want srun or mpiexec" "slurm-cpu with an unknown launcher"

out=$work/slurm-gpu.out
env EXAMOE_DRY_RUN=1 SLURM_NTASKS_PER_NODE=4 SLURM_CPUS_PER_TASK=8 CUDA_VISIBLE_DEVICES=4,5,6,7 \
    bash "$dir/slurm-gpu.sbatch" deck.toml >"$out"
cat "$out"
expect "$out" "OMP_NUM_THREADS=8" "slurm-gpu"
expect "$out" "srun --cpus-per-task=8 --gpu-bind=none .* examoe deck.toml --set comm.backend=nccl --set checkpoint.resume=true$" "slurm-gpu srun"
for r in 0 1 2 3; do
  expect "$out" "local rank $r: CUDA_VISIBLE_DEVICES=$((r + 4))$" "slurm-gpu binds local rank $r to the node's GPU $r"
done

out=$work/pbs-cpu.out
printf 'n1\nn1\nn2\nn2\nn3\nn3\n' >"$work/nodefile"
env EXAMOE_DRY_RUN=1 PBS_JOBID=77.pbs PBS_NODEFILE="$work/nodefile" PBS_O_WORKDIR="$work" OMP_NUM_THREADS=16 \
    bash "$dir/pbs-cpu.pbs" deck.toml --set train.steps=5 >"$out"
cat "$out"
expect "$out" "job 77.pbs: 3 node\(s\), 6 rank\(s\), OMP_NUM_THREADS=16 OMP_PROC_BIND=spread OMP_PLACES=threads" "pbs-cpu"
expect "$out" "^\[examoe-batch\] mpiexec -n 6 -hostfile $work/nodefile examoe deck.toml --set train.steps=5 --set checkpoint.resume=true$" "pbs-cpu mpiexec"
expect "$out" "qrerun 77.pbs" "pbs-cpu rerun"
env EXAMOE_DRY_RUN=1 DECK=other.toml EXAMOE_ARGS="--set train.steps=2 --set train.seed=3" \
    bash "$dir/pbs-cpu.pbs" >"$out"
expect "$out" "mpiexec -n 1 examoe other.toml --set train.steps=2 --set train.seed=3 --set checkpoint.resume=true$" "pbs-cpu with qsub -v DECK=..."
# The stop timer: walltime from qstat, EXAMOE_STOP_MARGIN_S before its end.
mkdir -p "$work/bin"
printf '#!/bin/sh\necho "Job Id: $2"\necho "    Resource_List.walltime = 02:00:30"\n' >"$work/bin/qstat"
chmod +x "$work/bin/qstat"
env PATH="$work/bin:$PATH" EXAMOE_DRY_RUN=1 PBS_JOBID=78.pbs EXAMOE_STOP_MARGIN_S=600 \
    bash "$dir/pbs-cpu.pbs" deck.toml >"$out"
expect "$out" "walltime 7230 s: the ranks are told to checkpoint and stop after 6630 s" "pbs-cpu stop timer"
echo "batch scripts: syntax and dry runs ok"
