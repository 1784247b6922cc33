#!/usr/bin/env bash
# The convergence study of gradient compression: one deck trained under each
# comm.compression mode for several seeds, the validation losses compared
# with the uncompressed runs' spread over the same seeds. A loss study, not a
# benchmark: the numbers do not depend on the machine's load.
#
#   scripts/compression_study.sh [DECK] [--steps N] [--set k=v ...]
#     DECK       default input/tiny.toml
#     --steps N  steps per run (default 300)
#     --set k=v  deck overrides for every run (repeatable)
#   MODES="none bf16 int8 ..."  what to compare (default below); each is
#              none | bf16 | int8 | bf16_sr | int8_sr (stochastic rounding)
#              | topk:RATIO | topk:RATIO:W (1-bit Adam's recipe: W dense
#              steps, then top-k with AdamW's second moment frozen:
#              comm.topk_warmup = optim.freeze_variance_step = W)
#              | freeze:W (uncompressed, the second moment frozen after W)
#   SEEDS="1 2 3"   train.seed of each run
#   NP=n       ranks (default 4); EXAMOE, MPIEXEC as for bench_layouts.sh
#   EVAL_BATCHES=n  validation batches per evaluation (default 16: the
#              deck's 4 make a noisy measure)
#   WORK=dir   keep the runs there (default runs/compression_study); a run
#              whose metrics already end at the last step is not run again
#   PLOT=file  the loss curves (default WORK/loss.png; needs matplotlib)
#   PYTHON=cmd the interpreter of the report (default python3)
#
# scripts/lib/compression_study_report.py prints, per mode, the final
# validation loss of each seed, their mean and standard deviation, the
# mean's change against none's, and the data-parallel gradients' wire bytes
# as a share of the logical ones.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
deck=$root/input/tiny.toml
steps=300
sets=()
while (($#)); do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    -h|--help) sed -n '2,/^set -euo/p' "$0" | sed '$d; s/^# \{0,1\}//'; exit 0 ;;
    -*) echo "compression_study.sh: unknown option $1 (see --help)" >&2; exit 2 ;;
    *) deck=$1; shift ;;
  esac
done
modes=${MODES:-none bf16 int8 bf16_sr topk:0.033 topk:0.1}
seeds=${SEEDS:-1 2 3}
np=${NP:-4}
examoe=${EXAMOE:-$root/${BUILD:-build}/bin/examoe}
mpiexec=${MPIEXEC:-mpiexec}
work=${WORK:-$root/runs/compression_study}
[[ -x $examoe ]] || { echo "compression_study.sh: no examoe at $examoe; build first (scripts/setup.sh)" >&2; exit 1; }
mkdir -p "$work"

mode_sets() {
  case $1 in
    none|bf16|int8) echo "--set comm.compression=$1" ;;
    bf16_sr|int8_sr) echo "--set comm.compression=${1%_sr} --set comm.stochastic_rounding=true" ;;
    topk:*:*) local r=${1#topk:}
      echo "--set comm.compression=topk --set comm.topk_ratio=${r%%:*} --set comm.topk_warmup=${r#*:}" \
           "--set optim.freeze_variance_step=${r#*:}" ;;
    topk:*) echo "--set comm.compression=topk --set comm.topk_ratio=${1#topk:}" ;;
    freeze:*) echo "--set optim.freeze_variance_step=${1#freeze:}" ;;
    *) echo "compression_study.sh: unknown mode '$1' (none, bf16, int8, bf16_sr, int8_sr, topk:RATIO[:W]," \
            "freeze:W)" >&2; return 1 ;;
  esac
}

finished() {  # the run's metrics hold its end record at the last step
  [[ -f $1/metrics.jsonl ]] && grep -q "\"event\":\"end\",\"step\":$steps," "$1/metrics.jsonl"
}

runs=()
for mode in $modes; do
  msets=$(mode_sets "$mode")
  for seed in $seeds; do
    dir=$work/${mode//:/_}/seed_$seed
    runs+=("$mode=$dir")
    if finished "$dir"; then echo "[study] $mode seed $seed: done before, kept"; continue; fi
    rm -rf "$dir"; mkdir -p "$dir"
    echo "[study] $mode seed $seed ($np ranks, $steps steps)"
    # shellcheck disable=SC2086  # msets is a list of --set pairs
    OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$mpiexec" -n "$np" "$examoe" "$deck" "${sets[@]}" $msets \
      --set train.seed="$seed" --set train.steps="$steps" --set train.eval_batches="${EVAL_BATCHES:-16}" \
      --set checkpoint.every=0 --set output.run_dir="$dir" > "$dir/log.txt" 2>&1 ||
      { echo "compression_study.sh: $mode seed $seed failed; see $dir/log.txt" >&2; exit 1; }
  done
done
"${PYTHON:-python3}" "$root/scripts/lib/compression_study_report.py" --plot "${PLOT:-$work/loss.png}" "${runs[@]}"
