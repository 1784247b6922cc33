#!/usr/bin/env bash
# Pipeline-parallel measurements (parallel.pp: bubbles per schedule, pp against dp). Never asserts a time.
#
#   scripts/bench_pipeline.sh bubbles [--pp P] [--steps N] [--warmup N] [--set k=v ...]
#     pp = P stages (default 4, one rank each), m = 8 micro-batches
#     (train.grad_accum) on a 4-layer d = 64, T = 32 shrink of
#     input/tiny.toml: for each schedule
#     (gpipe, 1f1b, zb, and interleaved with v = 2 on 2*P layers) the measured bubble (a stage's time blocked on
#     pipeline receives over its step time, from the metrics' "pipeline"
#     record; mean over the stages, median over the measured steps) next to
#     the schedule's theory.
#   scripts/bench_pipeline.sh vs-dp [DECK] [--steps N] [--warmup N] [--set k=v ...]
#     DECK (default input/bench.toml) on 2 ranks: pp = 2 (1f1b, m = 8) against
#     dp = 2 (m = 4 each: the same global batch and micro-batch): global
#     tokens/s (median over the measured steps) and, for pp, the bubble.
#
#   --steps N   measured steps (default 4); --warmup N  steps run first and
#               not measured (default 1); --set k=v  extra deck overrides
#   BUILD=dir   build directory holding bin/examoe (default: build)
#   MPIEXEC=cmd the MPI launcher (default: mpiexec)
#   WORK=dir    keep the runs there (default: a temporary directory)
#
# Each rank runs one thread. Ranks that share a core measure the scheduler
# as much as the schedule: the load average is printed with the figures.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
mode=${1:-}
[ "$mode" = bubbles ] || [ "$mode" = vs-dp ] || { sed -n '2,23p' "$0" >&2; exit 2; }
shift
deck=$here/input/bench.toml
if [ "$mode" = vs-dp ] && [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then deck=$1; shift; fi
steps=4 warmup=1 pp=4
sets=()
while [ $# -gt 0 ]; do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --pp) pp=$2; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    *) echo "bench_pipeline.sh: unknown argument '$1'" >&2; exit 2 ;;
  esac
done
examoe=${EXAMOE:-${BUILD:-$here/build}/bin/examoe}
mpiexec=${MPIEXEC:-mpiexec}
[ -x "$examoe" ] || { echo "bench_pipeline.sh: no $examoe (build the examoe target first)" >&2; exit 1; }
work=${WORK:-$(mktemp -d)}
[ -n "${WORK:-}" ] || trap 'rm -rf "$work"' EXIT
mkdir -p "$work"
total=$((steps + warmup))
common=(--set train.steps=$total --set train.log_every=1 --set train.eval_every=0 --set checkpoint.every=0
        --set data.path="$here/data/corpus.txt")

run() {  # run <name> <np> <args...>
  local name=$1 np=$2
  shift 2
  rm -rf "$work/$name"
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$mpiexec" -n "$np" "$examoe" "$@" "${common[@]}" "${sets[@]}" \
    --set output.run_dir="$work/$name" >"$work/$name.log" 2>&1 \
    || { echo "bench_pipeline.sh: run $name failed; see $work/$name.log" >&2; tail -5 "$work/$name.log" >&2; exit 1; }
}

summary() {  # summary <name>: JSON of the measured steps
  python3 - "$work/$1/metrics.jsonl" "$warmup" <<'PY'
import json, statistics, sys
recs = [json.loads(l) for l in open(sys.argv[1]) if '"loss"' in l]
recs = [r for r in recs if r["step"] > int(sys.argv[2])]
out = {"steps": len(recs), "tokens_per_s": statistics.median(r["tokens_per_s"] for r in recs)}
p = [r["pipeline"] for r in recs if "pipeline" in r]
if p:
    out["bubble"] = statistics.median(statistics.mean(x["bubble"]) for x in p)
    out["bubble_per_stage"] = [statistics.median(x["bubble"][s] for x in p) for s in range(p[0]["stages"])]
    out["bubble_theory"] = p[0]["bubble_theory"]
    out["schedule"] = p[0]["schedule"]
    out["peak_contexts"] = p[-1]["peak_contexts"]
print(json.dumps(out))
PY
}

echo "load average before: $(cut -d' ' -f1-3 /proc/loadavg), $(nproc) cores"
if [ "$mode" = bubbles ]; then
  shrink=("$here/input/tiny.toml" --set model.d_model=64 --set model.n_layers=4 --set model.seq_len=32
          --set train.micro_batch=2 --set train.grad_accum=8 --set parallel.pp=$pp)
  printf '%-12s %10s %10s  %s\n' schedule measured theory "per stage (measured)"
  results=()
  # interleaved: v = 2 chunks per stage of pp*2 one-layer blocks (the
  # others keep 4 layers; each figure is against its own theory).
  for s in gpipe 1f1b zb interleaved; do
    extra=(--set pipeline.schedule=$s)
    [ "$s" = interleaved ] && extra+=(--set pipeline.virtual_stages=2 --set model.n_layers=$((2 * pp)))
    run "$s" "$pp" "${shrink[@]}" "${extra[@]}"
    j=$(summary "$s")
    results+=("$j")
    python3 -c "import json,sys; r=json.loads(sys.argv[1]); print('%-12s %10.3f %10.3f  %s' % (sys.argv[2], r['bubble'], r['bubble_theory'], ' '.join('%.3f' % b for b in r['bubble_per_stage'])))" "$j" "$s"
  done
  echo "{\"event\":\"bench_pipeline_bubbles\",\"pp\":$pp,\"m\":8,\"gpipe\":${results[0]},\"1f1b\":${results[1]},\"zb\":${results[2]},\"interleaved\":${results[3]}}"
else
  run pp2 2 "$deck" --set parallel.pp=2 --set pipeline.schedule=1f1b --set train.grad_accum=8
  run dp2 2 "$deck" --set parallel.dp=2 --set train.grad_accum=4
  p=$(summary pp2)
  d=$(summary dp2)
  python3 -c "import json,sys; p=json.loads(sys.argv[1]); d=json.loads(sys.argv[2]); print('pp=2 1f1b m=8: %.0f tok/s, bubble %.3f (theory %.3f)\ndp=2:          %.0f tok/s' % (p['tokens_per_s'], p['bubble'], p['bubble_theory'], d['tokens_per_s']))" "$p" "$d"
  echo "{\"event\":\"bench_pipeline_vs_dp\",\"pp2\":$p,\"dp2\":$d}"
fi
echo "load average after: $(cut -d' ' -f1-3 /proc/loadavg)"
