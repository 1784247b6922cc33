#!/usr/bin/env bash
# The context-parallelism benchmark (parallel.cp): a long-sequence deck
# (model.seq_len = 2048 by default) at 2 ranks, context parallelism
# (cp = 2, ring attention: each sequence split over the two ranks) against
# data parallelism (dp = 2: each rank whole sequences) and against 1 rank.
#
#   scripts/bench_context.sh [DECK] [--steps N] [--warmup N] [--seq T] [--mode ring|a2a] [--set k=v ...]
#     DECK        default input/tiny.toml
#     --steps N   measured steps per run (default 4)
#     --warmup N  steps run first and not measured (default 1)
#     --seq T     model.seq_len (default 2048)
#     --mode M    parallel.cp_mode of the cp run (default ring)
#     --set k=v   deck overrides for every run (repeatable)
#   BUILD=dir, EXAMOE=path, MPIEXEC=cmd, WORK=dir as in scripts/bench_overlap.sh.
#
# Every run processes the same global batch per step: train.micro_batch = 2
# sequences; the 1-rank and cp runs take them in 2 micro-batches
# (grad_accum 2), the dp run 1 per rank. From rank 0's metrics.jsonl after
# the warm-up (medians over the measured steps) it prints, per run, tokens/s
# (global), seconds per step, the exposed communication (time.comm_exposed)
# and, for the cp run, its exposed ring share (context_comm_exposed: the
# waits for K/V blocks and dK/dV partial sums that compute did not hide),
# as a table and one JSON line ("event":"bench_context"). It never asserts a
# time. The numbers are only as good as the machine is quiet: the load
# average before and after is printed; on a shared machine treat them as
# indicative.
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
deck=$here/input/tiny.toml
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then
  deck=$1
  shift
fi
steps=4 warmup=1 seq=2048 mode=ring
sets=()
while [ $# -gt 0 ]; do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --seq) seq=$2; shift 2 ;;
    --mode) mode=$2; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    *) echo "[bench_context] unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
mpiexec=${MPIEXEC:-mpiexec}
build=${BUILD:-$here/build}
exe=${EXAMOE:-$build/bin/examoe}
if [ ! -x "$exe" ]; then
  echo "[bench_context] building examoe in $build" >&2
  cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  make -C "$build" -j"${JOBS:-1}" examoe >/dev/null
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1
if [ -n "${WORK:-}" ]; then
  work=$WORK
  mkdir -p "$work"
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/bench_context.XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi
cores=$(getconf _NPROCESSORS_ONLN)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "[bench_context] $(date -u +%FT%TZ) $cores cores, load average $load_before, deck $deck, seq_len $seq," \
     "$warmup warm-up + $steps measured steps" >&2
common=("${sets[@]}" --set "model.seq_len=$seq" --set train.micro_batch=1 --set "train.steps=$((warmup + steps))"
        --set train.log_every=1 --set train.eval_every=0 --set checkpoint.every=0 --set moe.aux_scope=sequence)
run() {  # NAME COMMAND...
  local name=$1
  shift
  rm -rf "${work:?}/$name"
  echo "[bench_context] run $name" >&2
  if ! "$@" --set "output.run_dir=$work/$name" >"$work/$name.log" 2>&1; then
    echo "[bench_context] run $name failed; the end of its log ($work/$name.log):" >&2
    tail -n 30 "$work/$name.log" >&2
    exit 1
  fi
}
run one "$exe" "$deck" "${common[@]}" --set train.grad_accum=2
run dp2 "$mpiexec" -n 2 "$exe" "$deck" "${common[@]}" --set train.grad_accum=1 --set parallel.dp=2
run cp2 "$mpiexec" -n 2 "$exe" "$deck" "${common[@]}" --set train.grad_accum=2 --set parallel.cp=2 \
    --set "parallel.cp_mode=$mode"
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

python3 - "$work" "$warmup" "$cores" "$load_before" "$load_after" "$deck" "$seq" "$mode" <<'PY'
import datetime, json, os, statistics, sys
work, warmup, cores, lb, la, deck, seq, mode = sys.argv[1:]
warmup = int(warmup)
med = statistics.median
def summary(name):
    recs = []
    with open(os.path.join(work, name, "metrics.jsonl")) as f:
        for line in f:
            x = json.loads(line)
            if "event" not in x and "time" in x and x["step"] > warmup:
                recs.append(x)
    if not recs:
        sys.exit(f"[bench_context] {name}: no step records after the warm-up")
    t = [x["time"]["compute"] + x["time"]["comm_exposed"] + x["time"]["io"] + x["time"]["eval"] for x in recs]
    return {"steps": len(recs), "tokens_per_s": med(x["tokens_per_s"] for x in recs), "step_s": med(t),
            "comm_s": med(x["time"]["comm_exposed"] for x in recs),
            "ring_s": med(x.get("context_comm_exposed", 0.0) for x in recs),
            "activations_mib": recs[-1]["memory"]["activations"] / 2**20}
runs = {k: summary(k) for k in ("one", "dp2", "cp2")}
label = {"one": "1 rank", "dp2": "2 ranks dp = 2", "cp2": f"2 ranks cp = 2 ({mode})"}
print(f"{'config':<24} {'tok/s':>9} {'step s':>8} {'comm s':>8} {'ring s':>8} {'act MiB':>8}")
for k, r in runs.items():
    print(f"{label[k]:<24} {r['tokens_per_s']:9.1f} {r['step_s']:8.3f} {r['comm_s']:8.3f} {r['ring_s']:8.3f} "
          f"{r['activations_mib']:8.1f}")
print(f"seq_len {seq}; load average {lb} -> {la} on {cores} cores (a shared machine: indicative only)")
print(json.dumps({"event": "bench_context",
                  "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
                  "deck": deck, "seq_len": int(seq), "mode": mode, "cores": int(cores), "load_before": lb,
                  "load_after": la, **runs}, separators=(",", ":")))
PY
