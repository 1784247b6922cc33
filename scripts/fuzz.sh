#!/usr/bin/env bash
# Builds the libFuzzer targets (tests/fuzz/, clang with ASan and UBSan) and
# runs one of them, or each in turn, for a while on its seed corpus.
#
#   scripts/fuzz.sh TARGET SECONDS   # TARGET: deck, checkpoint, token_shard, or all
#   scripts/fuzz.sh build            # configure and build only
#
# Every run prints, per target, libFuzzer's execution count and whether it
# found anything; the exit status is 1 when any run found a crash, a
# sanitizer report, a leak, a timeout or an out-of-memory, 2 on a usage or
# build error. A finding's input is kept as WORK/TARGET/crashes/<kind>-<sha1>
# (reproduce: build-fuzz/bin/fuzz_TARGET FILE); fix the bug, then add the
# input under tests/fuzz/TARGET/regressions/, where ctest replays it.
#
# The corpus grows in WORK/TARGET/corpus across runs (outside the checkout);
# each run first copies in the seeds (tests/fuzz/TARGET/seeds/ and
# regressions/; for deck also input/ and tests/decks/bad/). rm -rf WORK to
# start over.
#
# Environment: FUZZ_BUILD_DIR (default: build-fuzz in the checkout),
# FUZZ_WORK (default: ${TMPDIR:-/tmp}/examoe-fuzz), JOBS (build, default 2),
# CC / CXX (default clang-14 / clang++-14), FUZZ_ARGS (extra libFuzzer flags).
# One process per target: -jobs/-workers are left at libFuzzer's 1.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
build=${FUZZ_BUILD_DIR:-$root/build-fuzz}
work=${FUZZ_WORK:-${TMPDIR:-/tmp}/examoe-fuzz}
targets=(deck checkpoint token_shard)

usage() {
  echo "usage: scripts/fuzz.sh {${targets[*]// /|}|all} SECONDS   or   scripts/fuzz.sh build" >&2
  exit 2
}

do_build() {
  local t0; t0=$(date +%s)
  # clang 14 and its libFuzzer and sanitizer runtimes, beside the build's
  # own packages (idempotent: nothing to do when they are installed).
  "$root/scripts/deps-debian.sh"
  "$root/scripts/deps-debian.sh" clang-14 libclang-rt-14-dev
  if [ ! -f "$build/CMakeCache.txt" ]; then
    echo "[fuzz] configuring $build"
    CC=${CC:-clang-14} CXX=${CXX:-clang++-14} cmake -S "$root" -B "$build" -DEXAMOE_FUZZ=ON \
      -DCMAKE_BUILD_TYPE=Debug -DEXAMOE_ENABLE_TESTS=OFF -DEXAMOE_ENABLE_BENCHMARKS=OFF \
      >"$build.configure.log" 2>&1 || { echo "[fuzz] configure failed: $build.configure.log" >&2; exit 2; }
  fi
  local names=(); for t in "${targets[@]}"; do names+=("fuzz_$t"); done
  cmake --build "$build" -j "${JOBS:-2}" --target "${names[@]}" >"$build.build.log" 2>&1 ||
    { tail -30 "$build.build.log" >&2; echo "[fuzz] build failed: $build.build.log" >&2; exit 2; }
  echo "[fuzz] built ${names[*]} in $(( $(date +%s) - t0 )) s"
}

# run TARGET SECONDS: 0 when libFuzzer found nothing, 1 otherwise.
run_one() {
  local t=$1 secs=$2 dir=$work/$1
  mkdir -p "$dir/corpus" "$dir/crashes"
  local seeds=("$root/tests/fuzz/$t/seeds" "$root/tests/fuzz/$t/regressions")
  [ "$t" = deck ] && seeds+=("$root/input" "$root/tests/decks/bad")
  for s in "${seeds[@]}"; do
    [ -d "$s" ] && find "$s" -type f -exec cp -n {} "$dir/corpus/" \;
  done
  local args=(-max_total_time="$secs" -print_final_stats=1 -timeout=20 -rss_limit_mb=2048
              -artifact_prefix="$dir/crashes/")
  [ -f "$root/tests/fuzz/$t/$t.dict" ] && args+=(-dict="$root/tests/fuzz/$t/$t.dict")
  local before; before=$(ls "$dir/crashes" | wc -l)
  echo "[fuzz] $t: ${secs} s, corpus $dir/corpus ($(ls "$dir/corpus" | wc -l) files), log $dir/fuzz.log"
  # Read-only corpora would be the checkout's: libFuzzer writes new inputs
  # into the first directory only, the scratch one.
  # Leaks in MPICH, UCX and HDF5 are theirs (tests/sanitize/lsan.supp says which).
  (cd "$dir" && LSAN_OPTIONS="suppressions=$root/tests/sanitize/lsan.supp:print_suppressions=0" \
     "$build/bin/fuzz_$t" "${args[@]}" ${FUZZ_ARGS:-} "$dir/corpus") >"$dir/fuzz.log" 2>&1
  local rc=$?
  local execs; execs=$(sed -n 's/^stat::number_of_executed_units: *//p' "$dir/fuzz.log" | tail -1)
  local after; after=$(ls "$dir/crashes" | wc -l)
  if [ $rc -eq 0 ] && [ "$after" -eq "$before" ]; then
    echo "[fuzz] $t: ${execs:-?} executions, corpus $(ls "$dir/corpus" | wc -l) files, no finding"
    return 0
  fi
  echo "[fuzz] $t: FINDING after ${execs:-?} executions (libFuzzer exit $rc)"
  grep -m1 -E "^==[0-9]+==ERROR|runtime error:|FUZZ FINDING|ERROR: libFuzzer" "$dir/fuzz.log" | sed 's/^/[fuzz]   /'
  ls -t "$dir/crashes" | head -3 | sed "s|^|[fuzz]   input: $dir/crashes/|"
  return 1
}

[ $# -ge 1 ] || usage
case "$1" in
  build) do_build; exit 0 ;;
  all) sel=("${targets[@]}") ;;
  *) [[ " ${targets[*]} " == *" $1 "* ]] || usage; sel=("$1") ;;
esac
[ $# -eq 2 ] && [[ $2 =~ ^[0-9]+$ ]] && [ "$2" -gt 0 ] || usage
do_build
status=0
for t in "${sel[@]}"; do run_one "$t" "$2" || status=1; done
exit $status
