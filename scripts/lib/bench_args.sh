# shellcheck shell=bash
# Sourced by the benchmark scripts (scripts/bench_layouts.sh,
# scripts/bench_overlap.sh, scripts/bench_async_ckpt.sh,
# scripts/lib/bench_cores.sh): their shared command line and set-up.
#
#   [DECK] [--steps N] [--warmup N] [--set k=v ...] [--OPTION VALUE ...]
#
# The sourcing script sets, before sourcing:
#   bench_name      names the script in its messages
#   bench_opts      (optional) the extra options it takes, space-separated
#                   names without the dashes, each with one value: --zero Z
#                   sets opt_zero, --compare L sets opt_compare (a name's
#                   dashes become underscores); preset opt_NAME for a default
#   bench_defaults  (optional) a function called after the command line is
#                   read, before the defaults below fill in what it left out:
#                   it may set deck, steps, warmup from the options
#                   (bench_layouts.sh's defaults depend on --compare)
# and may preset EXAMOE. Sets root, deck (default input/bench.toml), steps
# (default 6), warmup (default 2), total (= steps + warmup), sets (the
# --set arguments, each as `--set k=v`), NP (default 2), EXAMOE (default
# $BUILD/bin/examoe, BUILD default build), MPIEXEC (default mpiexec), work
# ($WORK, or a temporary directory removed at exit), bench_fixed (the runs'
# own settings, last on their command line: train.steps = total, every step
# logged, evaluation and checkpoints off; a script may append to it), and
# defines:
#   bench_run NAME RANKS [ARGS...]  one examoe run of DECK ARGS bench_fixed
#                   on RANKS ranks (mpiexec), one thread per rank
#                   (OMP_NUM_THREADS=$bench_omp, default 1), into
#                   $work/NAME (log $work/NAME.log); a failed run prints the
#                   end of its log and exits
#   bench_load      the load average (1, 5, 15 minutes)
# Runs are read by scripts/lib/metrics_summary.py.
root=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
deck='' steps='' warmup=''
: "${bench_name:=benchmark}"
sets=()
bench_die() { echo "$bench_name: $*" >&2; exit 2; }
while [ $# -gt 0 ]; do
  case "$1" in
    --steps|--warmup|--set) ;;
    --*) case " ${bench_opts:-} " in *" ${1#--} "*) ;; *) bench_die "unknown option $1 (see the header of $0)" ;; esac ;;
    -*) bench_die "unknown option $1 (see the header of $0)" ;;
    *) [ -z "$deck" ] || bench_die "one deck only ($deck, then $1)"; deck=$1; shift; continue ;;
  esac
  [ $# -ge 2 ] || bench_die "$1 wants a value (see the header of $0)"
  case "$1" in
    --steps) steps=$2 ;;
    --warmup) warmup=$2 ;;
    --set) sets+=(--set "$2") ;;
    *) opt=${1#--}; printf -v "opt_${opt//-/_}" '%s' "$2" ;;
  esac
  shift 2
done
if declare -F bench_defaults >/dev/null; then bench_defaults; fi
deck=${deck:-$root/input/bench.toml}
steps=${steps:-6}
warmup=${warmup:-2}
case "$steps" in ''|*[!0-9]*|0) bench_die "--steps wants a number >= 1, not '$steps'" ;; esac
case "$warmup" in ''|*[!0-9]*) bench_die "--warmup wants a number >= 0, not '$warmup'" ;; esac
[ -r "$deck" ] || bench_die "no deck $deck"
deck=$(cd "$(dirname "$deck")" && pwd)/$(basename "$deck")
NP=${NP:-2}
case "$NP" in ''|*[!0-9]*|0) bench_die "NP wants a number >= 1, not '$NP'" ;; esac
EXAMOE=${EXAMOE:-${BUILD:-$root/build}/bin/examoe}
MPIEXEC=${MPIEXEC:-mpiexec}
[ -x "$EXAMOE" ] || { echo "$bench_name: $EXAMOE not built (scripts/setup.sh)" >&2; exit 1; }
work=${WORK:-$(mktemp -d "${TMPDIR:-/tmp}/examoe-bench.XXXXXX")}
mkdir -p "$work"
[ -n "${WORK:-}" ] || trap 'rm -rf "$work"' EXIT
total=$((steps + warmup))
bench_fixed=(--set train.steps="$total" --set train.log_every=1 --set train.eval_every=0 --set checkpoint.every=0)

bench_run() {  # NAME RANKS [ARGS...]
  local name=$1 ranks=$2
  shift 2
  rm -rf "${work:?}/$name"
  echo "[$bench_name] run $name ($ranks rank(s))" >&2
  if ! OMP_NUM_THREADS=${bench_omp:-1} OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 \
       "$MPIEXEC" -n "$ranks" "$EXAMOE" "$deck" "$@" "${bench_fixed[@]}" --set output.run_dir="$work/$name" \
       >"$work/$name.log" 2>&1; then
    echo "[$bench_name] run $name failed; the end of its log ($work/$name.log):" >&2
    tail -n 30 "$work/$name.log" >&2
    exit 1
  fi
}

bench_load() { cut -d' ' -f1-3 /proc/loadavg; }
