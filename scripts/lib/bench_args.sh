# Sourced by the layout benchmarks (bench_ep.sh, bench_tp.sh): their shared
# command line `[DECK] [--steps N] [--warmup N] [--set k=v ...]` and set-up.
# Sets root, deck, steps, warmup, sets, NP, EXAMOE, MPIEXEC, work, total.
# $bench_name names the script in its messages.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
deck=$root/input/bench.toml
steps=6 warmup=2
sets=()
while [ $# -gt 0 ]; do
  case "$1" in
    --steps) steps=$2; shift 2 ;;
    --warmup) warmup=$2; shift 2 ;;
    --set) sets+=(--set "$2"); shift 2 ;;
    -*) echo "$bench_name: unknown option $1" >&2; exit 2 ;;
    *) deck=$1; shift ;;
  esac
done
NP=${NP:-2}
EXAMOE=${EXAMOE:-$root/build/bin/examoe}
MPIEXEC=${MPIEXEC:-mpiexec}
[ -x "$EXAMOE" ] || { echo "$bench_name: $EXAMOE not built (scripts/setup.sh)" >&2; exit 1; }
work=${WORK:-$(mktemp -d)}
mkdir -p "$work"
[ -n "${WORK:-}" ] || trap 'rm -rf "$work"' EXIT
total=$((steps + warmup))
