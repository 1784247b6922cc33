#!/usr/bin/env bash
# The overlap and scaling benchmark (comm.overlap): exposed communication with
# the gradient collectives overlapped with the backward pass and without,
# and the weak-scaling efficiency of NP data-parallel ranks against one.
#
#   scripts/bench_overlap.sh [DECK] [--steps N] [--warmup N] [--zero Z] [--set k=v ...]
#     DECK        default input/bench.toml
#     --steps N   measured steps per run (default 8)
#     --warmup N  steps run first and not measured (default 2)
#     --zero Z    parallel.zero of the NP-rank runs (default 0); the 1-rank
#                 reference always runs zero 0 (plain replica, no sharding)
#     --repeat R  run the three configurations round-robin R times
#                 (default 1) and pool their measured steps
#     --set k=v   deck overrides for every run (repeatable; train.steps,
#                 train.log_every, train.eval_every, checkpoint.every,
#                 parallel.zero, comm.overlap and output.run_dir are the
#                 benchmark's)
#   NP=n        data-parallel ranks (default 2)
#   BUILD=dir   build directory holding bin/examoe (default: build), built
#               (examoe only) when missing; EXAMOE=path names the binary
#   MPIEXEC=cmd the MPI launcher (default: mpiexec)
#   WORK=dir    keep the run directories and logs there (default: a
#               temporary directory, removed at exit)
#   OUT=file    also append the result's JSON line to this file
#
# Three runs, same per-rank micro-batch (weak scaling: the global batch
# grows with the ranks): 1 rank; NP ranks with comm.overlap = true; NP ranks
# with comm.overlap = false. Every step is logged (train.log_every = 1),
# evaluation and checkpoints are off, one thread per rank. The step records
# of rank 0's metrics.jsonl after the warm-up give, per configuration
# (medians over the measured steps, robust to a busy neighbour's bursts):
#   tok/s      global tokens per second (all ranks together) = tokens per
#              step / median step time
#   step       median wall seconds per step
#   compute    median seconds per step not spent in communication calls
#   comm       median exposed communication, seconds per step: time rank 0
#              spent launching, polling and waiting on collectives (what
#              overlap did not hide)
#   comm eff   compute / (compute + comm)
#   weak eff   tok/s(NP ranks) / (NP x tok/s(1 rank))
#   state MiB  parameters + gradients + optimizer + ZeRO buffers per rank
# and the overlap gain: comm(overlap off) - comm(overlap on). It prints a
# table and one JSON line ("event":"bench_overlap", means and extremes
# too). It never asserts a time. Run it with at least NP idle cores: ranks
# sharing a core measure the scheduler, and the load average printed before
# and after says how busy the machine was. BLAS kernels are chosen as
# scripts/bench.sh does (scripts/lib/blas_env.sh).
set -euo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
deck=$here/input/bench.toml
if [ $# -gt 0 ] && [ "${1#--}" = "$1" ]; then
  deck=$1
  shift
fi
steps=8 warmup=2 zero=0 repeat=1
sets=()
while [ $# -gt 0 ]; do
  case $1 in
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --zero) zero=$2; shift 2 ;;
    --repeat) repeat=$2; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    *) echo "[bench_overlap] unknown argument '$1' (see the header of $0)" >&2; exit 2 ;;
  esac
done
if [ "$steps" -lt 1 ] || [ "$repeat" -lt 1 ]; then
  echo "[bench_overlap] --steps and --repeat must be >= 1" >&2
  exit 2
fi
np=${NP:-2}
mpiexec=${MPIEXEC:-mpiexec}
build=${BUILD:-$here/build}
exe=${EXAMOE:-$build/bin/examoe}
if [ ! -x "$exe" ]; then
  echo "[bench_overlap] building examoe in $build" >&2
  cmake -S "$here" -B "$build" -DCMAKE_BUILD_TYPE=Release >/dev/null
  make -C "$build" -j"${JOBS:-1}" examoe >/dev/null
fi
export OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1
# shellcheck source=scripts/lib/blas_env.sh
. "$here/scripts/lib/blas_env.sh"
exa_blas_coretype bench_overlap "every rank"

if [ -n "${WORK:-}" ]; then
  work=$WORK
  mkdir -p "$work"
else
  work=$(mktemp -d "${TMPDIR:-/tmp}/bench_overlap.XXXXXX")
  trap 'rm -rf "$work"' EXIT
fi

cores=$(getconf _NPROCESSORS_ONLN)
load_before=$(cut -d' ' -f1-3 /proc/loadavg)
echo "[bench_overlap] $(date -u +%FT%TZ) $cores cores, load average $load_before," \
     "OPENBLAS_CORETYPE=${OPENBLAS_CORETYPE:-<auto>}, deck $deck, zero $zero, $np ranks," \
     "$warmup warm-up + $steps measured steps, $repeat round(s)" >&2
if [ "$cores" -lt "$np" ]; then
  echo "[bench_overlap] warning: $cores cores for $np ranks: ranks share cores, the numbers measure the scheduler" >&2
fi

# The benchmark's own settings come last: they win over --set.
common=("${sets[@]}" --set "train.steps=$((warmup + steps))" --set train.log_every=1
        --set train.eval_every=0 --set checkpoint.every=0)
run() {  # NAME COMMAND...: runs one configuration into $work/NAME (log: $work/NAME.log)
  local name=$1
  shift
  rm -rf "${work:?}/$name"
  echo "[bench_overlap] run $name" >&2
  if ! "$@" --set "output.run_dir=$work/$name" >"$work/$name.log" 2>&1; then
    echo "[bench_overlap] run $name failed; the end of its log ($work/$name.log):" >&2
    tail -n 30 "$work/$name.log" >&2
    exit 1
  fi
}
for r in $(seq 1 "$repeat"); do
  run "one.$r" "$exe" "$deck" "${common[@]}" --set parallel.zero=0
  run "on.$r" "$mpiexec" -n "$np" "$exe" "$deck" "${common[@]}" --set "parallel.zero=$zero" --set comm.overlap=true
  run "off.$r" "$mpiexec" -n "$np" "$exe" "$deck" "${common[@]}" --set "parallel.zero=$zero" --set comm.overlap=false
done
load_after=$(cut -d' ' -f1-3 /proc/loadavg)

result=$(python3 - "$work" "$warmup" "$np" "$zero" "$cores" "$load_before" "$load_after" \
                   "${OPENBLAS_CORETYPE:-auto}" "$deck" "$repeat" <<'EOF'
import datetime, json, os, statistics, sys
work, warmup, np_, zero, cores, load_before, load_after, coretype, deck, repeat = sys.argv[1:]
warmup, np_, repeat = int(warmup), int(np_), int(repeat)

def summary(name):
    recs = []
    for r in range(1, repeat + 1):
        with open(os.path.join(work, f"{name}.{r}", "metrics.jsonl")) as f:
            for line in f:
                x = json.loads(line)
                if "event" not in x and "time" in x and x["step"] > warmup:
                    recs.append(x)
    if not recs:
        sys.exit(f"[bench_overlap] {name}: no step records after the {warmup} warm-up steps")
    t = [sum(x["time"].values()) for x in recs]  # wall seconds of each step (log_every = 1)
    tokens = recs[0]["tokens_per_s"] * t[0]       # global tokens per step
    med = statistics.median
    comp = med(x["time"]["compute"] for x in recs)
    comm = med(x["time"]["comm_exposed"] for x in recs)
    m = recs[-1]["memory"]
    return {
        "steps": len(recs),
        "tokens_per_step": round(tokens),
        "tokens_per_s": tokens / med(t),
        "step_s": med(t),
        "step_s_mean": sum(t) / len(t),
        "step_s_min": min(t),
        "step_s_max": max(t),
        "compute_s": comp,
        "comm_s": comm,
        "comm_s_mean": sum(x["time"]["comm_exposed"] for x in recs) / len(recs),
        "comm_eff": comp / (comp + comm) if comp + comm > 0 else float("nan"),
        "state_mib": (m["params"] + m["grads"] + m["optim"] + m["buffers"]) / 2**20,
    }

runs = {"one": summary("one"), "on": summary("on"), "off": summary("off")}
for k in ("on", "off"):
    runs[k]["weak_eff"] = runs[k]["tokens_per_s"] / (np_ * runs["one"]["tokens_per_s"])
gain = runs["off"]["comm_s"] - runs["on"]["comm_s"]

label = {"one": "1 rank (zero 0)", "on": f"{np_} ranks overlap on", "off": f"{np_} ranks overlap off"}
print(f"{'config':<22} {'tok/s':>9} {'step s':>8} {'compute s':>10} {'comm s':>8} {'comm eff':>9} "
      f"{'weak eff':>9} {'state MiB':>10}")
for k, r in runs.items():
    weak = f"{100 * r['weak_eff']:8.1f}%" if "weak_eff" in r else f"{'-':>9}"
    print(f"{label[k]:<22} {r['tokens_per_s']:9.1f} {r['step_s']:8.3f} {r['compute_s']:10.3f} {r['comm_s']:8.3f} "
          f"{100 * r['comm_eff']:8.1f}% {weak} {r['state_mib']:10.1f}")
print(f"overlap gain (exposed comm off - on): {gain:.3f} s/step "
      f"({100 * gain / runs['off']['comm_s'] if runs['off']['comm_s'] > 0 else 0:.0f}% of the exposed comm without overlap); "
      f"zero {zero}; load average {load_before} -> {load_after} on {cores} cores")
print(json.dumps({
    "event": "bench_overlap",
    "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ"),
    "deck": deck, "ranks": np_, "zero": int(zero), "warmup": warmup, "repeat": repeat, "cores": int(cores),
    "load_before": load_before, "load_after": load_after, "openblas_coretype": coretype,
    "one_rank": runs["one"], "overlap_on": runs["on"], "overlap_off": runs["off"],
    "overlap_gain_s": gain,
}, separators=(",", ":")))
EOF
)
echo "$result"
if [ -n "${OUT:-}" ]; then
  grep '^{' <<<"$result" | tail -n 1 >>"$OUT"
fi
