#!/usr/bin/env bash
# The planner's step time and memory against measured runs
# (docs/planner.md, "Validation"): 27 layouts and policies of
# input/bench.toml on 1 and 2 ranks, one after another on an idle machine.
# Writes docs/plan_validation.{md,json,png} (OUT to change the prefix).
# The cluster file's two matmul efficiencies are fitted again to the day's
# one-rank runs `one` and `one_bf16` (this VM's speed drifts from day to
# day); every other layout is held out. --no-fit predicts with the file
# as it is; --reuse predicts again from the runs already in WORK.
#
#   scripts/plan-validate.sh [--only NAME ...] [--no-fit] [--reuse]
#
# EXAMOE, EXAMOE_PLAN (default build/bin/...), CLUSTER (default
# input/clusters/local-2core.toml), WORK (default a temporary directory).
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
exec "${PYTHON:-python3}" "$root/scripts/lib/plan_validate.py" \
  --examoe "${EXAMOE:-$root/build/bin/examoe}" --plan "${EXAMOE_PLAN:-$root/build/bin/examoe-plan}" \
  --mpiexec "${MPIEXEC:-mpiexec}" --cluster "${CLUSTER:-$root/input/clusters/local-2core.toml}" \
  --work "${WORK:-$(mktemp -d)}" --out "${OUT:-$root/docs/plan_validation}" "$@"
