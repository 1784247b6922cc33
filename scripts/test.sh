#!/usr/bin/env bash
# Sets everything up and runs the whole test suite: the CI legs.
#
#   scripts/test.sh                  # the CI legs: serial, openmp, cuda, spack, fuzz
#   scripts/test.sh serial           # Debian's Kokkos 3.4.1 (Serial): full suite
#   scripts/test.sh openmp           # OpenMP Kokkos 4.6.01 (scripts/build-kokkos.sh), 2 threads: the suite
#                                    # less the layout matrix (label `layouts`; one case per feature stays)
#                                    # and the tests that run no kernels (labels batch, docs, layering, selftest)
#   scripts/test.sh cuda             # CUDA Kokkos: compile and link only (no GPU here)
#   scripts/test.sh spack            # the Spack package with an offline Spack (scripts/test-spack.sh;
#                                    # skipped when there is none)
#   scripts/test.sh fuzz             # each libFuzzer target for FUZZ_SECONDS (30) (scripts/fuzz.sh)
#   scripts/test.sh sanitize         # ASan+UBSan and TSan builds and their tests (scripts/test-sanitize.sh;
#                                    # SANITIZE=asan or tsan for one); not a CI leg (time)
#
# The layering check (scripts/check-layering.sh) runs first. The legs table
# at the end gives each leg's status (leg_status below), wall time and ctest
# counts; the last line sums the counts:
#   tests: N passed, N failed, N skipped
# A skipped test (ctest's "Skipped" or "Disabled": exit code 77, see
# tests/CMakeLists.txt) is counted as skipped, never as passed.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
legs=("$@")
[ ${#legs[@]} -eq 0 ] && legs=(serial openmp cuda spack fuzz)
JOBS=${JOBS:-2}
# New build directories compile in batches (scripts/setup.sh): this is the
# fresh-machine command, where every source is compiled once per leg.
EXAMOE_UNITY_BUILD=${EXAMOE_UNITY_BUILD:-ON}
export JOBS EXAMOE_UNITY_BUILD
passed=0; failed=0; skipped=0; status=0
summary=()

# The legs table's word for a leg's exit status: 77 means the leg could not
# run here (what it needs is missing) and says so; it is not a failure, and
# not a pass either. Every leg, present or future, goes through this.
leg_status() {  # exit-status
  case $1 in
    0) echo ok ;;
    77) echo skipped ;;
    *) echo FAIL ;;
  esac
}

# Tests run two at a time by default (CTEST_JOBS): ctest counts each MPI
# test's PROCESSORS against that, so a 4-rank test still runs alone.
# Sets leg_counts ("N passed, N failed, N skipped") and adds to the totals.
# ctest's own "N% tests passed, F tests failed out of T" counts skipped tests
# in T and so in its "passed": the skips are read from its "The following
# tests did not run:" list, (Skipped) ones being in T, (Disabled) ones not.
run_ctest() {  # build-dir, extra env...   (CTEST_ARGS: extra ctest arguments)
  local dir=$1; shift
  local out; out=$(mktemp)
  (cd "$dir" && env "$@" ctest --output-on-failure --no-tests=error -j "${CTEST_JOBS:-2}" ${CTEST_ARGS:-} 2>&1) | tee "$out"
  local rc=${PIPESTATUS[0]}
  count_ctest "$out" || { [ "$rc" -eq 0 ] && rc=1; }
  rm -f "$out"
  return "$rc"
}

# count_ctest FILE: the counts of every ctest summary in FILE (a leg that
# runs ctest more than once, as the sanitize leg does, writes them all).
count_ctest() {
  local out=$1 p=0 f=0 s=0 n=0 line
  while IFS= read -r line; do
    [[ $line =~ ([0-9]+)\ tests\ failed\ out\ of\ ([0-9]+) ]] || continue
    f=$((f + BASH_REMATCH[1])); p=$((p + BASH_REMATCH[2] - BASH_REMATCH[1])); n=$((n + 1))
  done < <(grep -E "tests passed, [0-9]+ tests failed out of [0-9]+" "$out")
  local n_skip n_dis
  n_skip=$(sed -n '/^The following tests did not run:/,/^$/p' "$out" | grep -cE '^[[:space:]]+[0-9]+ - .* \(Skipped\)$')
  n_dis=$(sed -n '/^The following tests did not run:/,/^$/p' "$out" | grep -cE '^[[:space:]]+[0-9]+ - .* \(Disabled\)$')
  if [ "$n" -eq 0 ]; then
    echo "test.sh: no ctest summary in the output" >&2
    leg_counts="no ctest summary"
    return 1
  fi
  p=$((p - n_skip)); s=$((n_skip + n_dis))
  passed=$((passed + p)); failed=$((failed + f)); skipped=$((skipped + s))
  leg_counts="$p passed, $f failed, $s skipped"
}

# The layering rule (docs/architecture.md, "Layers"): no build needed, so first.
t0=$(date +%s)
echo "=== layering ==="
rc=0
"$root/scripts/check-layering.sh" "$root" || rc=$?
summary+=("$(printf '%-8s %-7s %4d s' layering "$(leg_status $rc)" "$(( $(date +%s) - t0 ))")")
[ "$(leg_status $rc)" = FAIL ] && status=1

# A new leg is one branch here; it exits 77 when it cannot run on this
# machine, and calls run_ctest if it runs tests.
for leg in "${legs[@]}"; do
  t0=$(date +%s)
  echo "=== leg: $leg ==="
  leg_counts=""
  case "$leg" in
    serial) "$root/scripts/setup.sh" serial && run_ctest "${BUILD_DIR:-$root/build}" ;;
    # The layout matrix, and what runs no Kokkos kernel of its own (the
    # batch scripts, the docs and layering checks, the PyTorch reference's
    # self-test), run in the serial leg only.
    openmp) "$root/scripts/setup.sh" openmp &&
              CTEST_ARGS="-LE layouts|batch|docs|layering|selftest ${CTEST_ARGS:-}" \
              run_ctest "$root/build-openmp" OMP_NUM_THREADS=2 OMP_PROC_BIND=false ;;
    cuda)   "$root/scripts/setup.sh" cuda && leg_counts="compiled and linked; no test runs (no GPU)" &&
              echo "[cuda] every target compiled and linked (nothing runs: no GPU)" ;;
    spack)  "$root/scripts/test-spack.sh" ;;
    # A fixed seed and a new corpus from the seeds alone: every run tries the
    # same inputs in the same order, as far as its 30 s reach.
    fuzz)   fw=$(mktemp -d "${TMPDIR:-/tmp}/examoe-fuzz-ci.XXXXXX")
            FUZZ_WORK=$fw FUZZ_ARGS="-seed=1 ${FUZZ_ARGS:-}" "$root/scripts/fuzz.sh" all "${FUZZ_SECONDS:-30}"
            rc=$?
            # Each target's run counts as one test.
            if [ $rc -eq 0 ]; then passed=$((passed + 3)); leg_counts="3 passed (targets, ${FUZZ_SECONDS:-30} s each)"
            else failed=$((failed + 1)); leg_counts="a finding or a build error (fuzz.sh's output above)"; fi
            [ $rc -eq 0 ] && rm -rf "$fw" || echo "[fuzz] inputs and logs kept in $fw"
            (exit $rc) ;;
    sanitize) log=$(mktemp); SANITIZE_CTEST_LOG=$log "$root/scripts/test-sanitize.sh" ${SANITIZE:-}
              rc=$?; count_ctest "$log" || { [ $rc -eq 0 ] && rc=1; }; rm -f "$log"; (exit $rc) ;;
    *) echo "test.sh: unknown leg '$leg' (want serial, openmp, cuda, spack, fuzz or sanitize)" >&2; false ;;
  esac
  rc=$?
  dt=$(( $(date +%s) - t0 ))
  summary+=("$(printf '%-8s %-7s %4d s  %s' "$leg" "$(leg_status $rc)" "$dt" "$leg_counts")")
  [ "$(leg_status $rc)" = FAIL ] && status=1
done
echo "=== legs ==="
printf '%s\n' "${summary[@]}"
echo "tests: $passed passed, $failed failed, $skipped skipped"
exit $status
