#!/usr/bin/env bash
# Sets everything up and runs the whole test suite: the four CI legs.
#
#   scripts/test.sh                  # all legs: serial, openmp, cuda, spack
#   scripts/test.sh serial           # Debian's Kokkos 3.4.1 (Serial): full suite
#   scripts/test.sh openmp           # OpenMP Kokkos from Debian source, 2 threads: the suite less the
#                                    # layout matrix (label `layouts`; one case per feature stays)
#   scripts/test.sh cuda             # CUDA Kokkos: compile and link only (no GPU here)
#   scripts/test.sh spack            # the Spack package with the offline Spack in ../shared/tools/spack
#                                    # (scripts/test-spack.sh; skipped when that is absent)
#
# The layering check (scripts/check-layering.sh) runs first. Each leg's wall
# time is printed; the last line sums the ctest counts.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
legs=("$@")
[ ${#legs[@]} -eq 0 ] && legs=(serial openmp cuda spack)
JOBS=${JOBS:-2}
export JOBS
passed=0; failed=0; status=0
summary=()

# Tests run two at a time by default (CTEST_JOBS): ctest counts each MPI
# test's PROCESSORS against that, so a 4-rank test still runs alone.
run_ctest() {  # build-dir, extra env...   (CTEST_ARGS: extra ctest arguments)
  local dir=$1; shift
  local out; out=$(mktemp)
  (cd "$dir" && env "$@" ctest --output-on-failure -j "${CTEST_JOBS:-2}" ${CTEST_ARGS:-} 2>&1) | tee "$out"
  local rc=${PIPESTATUS[0]}
  local line; line=$(grep -E "tests passed, [0-9]+ tests failed out of [0-9]+" "$out" | tail -1)
  if [[ $line =~ ([0-9]+)\ tests\ failed\ out\ of\ ([0-9]+) ]]; then
    failed=$((failed + BASH_REMATCH[1])); passed=$((passed + BASH_REMATCH[2] - BASH_REMATCH[1]))
  fi
  rm -f "$out"
  return "$rc"
}

# The layering rule (docs/architecture.md, "Layers"): no build needed, so first.
t0=$(date +%s)
echo "=== layering ==="
rc=0
"$root/scripts/check-layering.sh" "$root" || rc=1
summary+=("$(printf '%-8s %-4s %4d s' layering "$([ $rc -eq 0 ] && echo ok || echo FAIL)" "$(( $(date +%s) - t0 ))")")
[ $rc -ne 0 ] && status=1

for leg in "${legs[@]}"; do
  t0=$(date +%s)
  echo "=== leg: $leg ==="
  rc=0
  case "$leg" in
    serial) "$root/scripts/setup.sh" serial && run_ctest "${BUILD_DIR:-$root/build}" || rc=1 ;;
    openmp) "$root/scripts/setup.sh" openmp &&
              CTEST_ARGS="-LE layouts" run_ctest "$root/build-openmp" OMP_NUM_THREADS=2 OMP_PROC_BIND=false || rc=1 ;;
    cuda)   "$root/scripts/setup.sh" cuda && echo "[cuda] every target compiled and linked (nothing runs: no GPU)" || rc=1 ;;
    spack)  "$root/scripts/test-spack.sh" || rc=1 ;;
    *) echo "test.sh: unknown leg '$leg' (want serial, openmp, cuda or spack)" >&2; rc=2 ;;
  esac
  dt=$(( $(date +%s) - t0 ))
  summary+=("$(printf '%-8s %-4s %4d s' "$leg" "$([ $rc -eq 0 ] && echo ok || echo FAIL)" "$dt")")
  [ $rc -ne 0 ] && status=1
done
echo "=== legs ==="
printf '%s\n' "${summary[@]}"
echo "tests: $passed passed, $failed failed"
exit $status
