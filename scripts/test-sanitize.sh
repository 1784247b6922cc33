#!/usr/bin/env bash
# The sanitizer leg (scripts/test.sh sanitize): ExaMoE's Serial build with
# AddressSanitizer + UndefinedBehaviorSanitizer, then a ThreadSanitizer
# build, each running the tests that exercise what it checks.
#
#   scripts/test-sanitize.sh            # both
#   scripts/test-sanitize.sh asan       # ASan + UBSan: unit tests and the 1- and 2-rank training tests
#   scripts/test-sanitize.sh tsan       # TSan: the async checkpoint writer and the overlapped collectives
#
# Build directories build-asan/ and build-tsan/ (BUILD_ASAN, BUILD_TSAN
# override), RelWithDebInfo, Debian's Kokkos 3.4.1 (Serial). Any report
# fails the test that produced it: UBSan does not recover, and ASan and
# TSan exit non-zero. The suppressions, each naming the library and why,
# are in tests/sanitize/.
#
# With SANITIZE_CTEST_LOG set, ctest's output is appended to that file too
# (scripts/test.sh counts the tests from it).
#
# Tests chosen by ctest label and name (SANITIZE_ASAN_TESTS and
# SANITIZE_TSAN_TESTS override the regexes):
#   asan: labels core, kernels, model, optim, io, deck, parallel, fuzz and
#         mpi, and the train tests of 1 and 2 ranks (PROCESSORS <= 2; the
#         layout matrix, the Slurm cluster and the Python cross-checks are
#         left to the serial leg);
#   tsan: the async checkpoint test, the overlapped column-parallel
#         gathers, the watchdog and the comm tests.
set -uo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
sel=("$@")
[ ${#sel[@]} -eq 0 ] && sel=(asan tsan)
supp=$root/tests/sanitize
status=0

# configure_and_build DIR FLAGS TARGETS...
configure_and_build() {  # TARGETS empty: everything
  local dir=$1 flags=$2; shift 2
  local targets="$*"
  # CMake takes the sanitizer flags from CXXFLAGS, CFLAGS and LDFLAGS when it
  # first configures the directory.
  BUILD_DIR=$dir EXAMOE_ARCH="" EXAMOE_PROGRESS=${EXAMOE_PROGRESS:-ON} TARGETS="$targets" \
    CMAKE_ARGS="-DCMAKE_BUILD_TYPE=RelWithDebInfo -DEXAMOE_ENABLE_BENCHMARKS=OFF" \
    CXXFLAGS="$flags" CFLAGS="$flags" LDFLAGS="$flags" "$root/scripts/setup.sh" serial
}

# The executables behind the tests ctest -N lists for these arguments, read
# from the CTestTestfile.cmake files (ctest -N shows no command for a test
# whose program is not built yet).
targets_of() {  # build-dir ctest-args...
  local dir=$1; shift
  local names; names=$(cd "$dir" && ctest -N "$@" 2>/dev/null | sed -n 's/^ *Test *#[0-9]*: //p')
  [ -n "$names" ] || return 0
  local name
  while IFS= read -r name; do
    grep -rhF --include=CTestTestfile.cmake "add_test([=[$name]=] " "$dir"
  done <<<"$names" | tr -d '"()' | tr ' ' '\n' | grep -F "$dir/bin/" |
    sed -n 's|.*/bin/\([A-Za-z0-9_.-]*\)$|\1|p' | sort -u
}

run_leg() {  # name dir flags env-vars ctest-args...
  local name=$1 dir=$2 flags=$3 envs=$4; shift 4
  echo "=== sanitize: $name ($dir) ==="
  configure_and_build "$dir" "$flags" none || return 1
  local t; t=$(targets_of "$dir" "$@" | tr '\n' ' ')
  [ -n "$t" ] || { echo "[sanitize] $name: no test selected by: $*" >&2; return 1; }
  # examoe and examoe-ckpt run inside the cmake-script tests. Make builds
  # named targets one after another, each on one core for a one-source test
  # program: past a few, the whole tree (-j over all of it) is sooner.
  if [ "$(wc -w <<<"$t")" -gt 8 ]; then t=""; else t="$t examoe examoe-ckpt"; fi
  configure_and_build "$dir" "$flags" $t || return 1
  local log=${SANITIZE_CTEST_LOG:-/dev/null}
  (cd "$dir" && env $envs ctest --output-on-failure --no-tests=error -j "${CTEST_JOBS:-2}" "$@" 2>&1) | tee -a "$log"
  return "${PIPESTATUS[0]}"
}

for s in "${sel[@]}"; do
  case $s in
    asan)
      run_leg asan "${BUILD_ASAN:-$root/build-asan}" \
        "-fsanitize=address,undefined -fno-sanitize-recover=undefined -fno-omit-frame-pointer" \
        "ASAN_OPTIONS=detect_leaks=1:abort_on_error=0:strict_string_checks=1:detect_stack_use_after_return=1 LSAN_OPTIONS=suppressions=$supp/lsan.supp:print_suppressions=0 UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1 OMP_NUM_THREADS=1" \
        -R "${SANITIZE_ASAN_TESTS:-^(test_|mpi_|fuzz_replay|train\.(restart|aux_free|stop_signal|async|nan_policy|dead_rank)|test_deck_reads|test_energy|test_moe_load)}" \
        -E "(\.np4|\.OpenMP|\.Cuda|_np4|python|layouts)" || status=1 ;;
    tsan)
      # UCX_MEM_EVENTS=no: UCX (MPICH's transport) hooks madvise, and its hook
      # takes a lock that TSan's interceptor crashes on when a thread exits.
      run_leg tsan "${BUILD_TSAN:-$root/build-tsan}" "-fsanitize=thread -fno-omit-frame-pointer" \
        "TSAN_OPTIONS=suppressions=$supp/tsan.supp:halt_on_error=1:second_deadlock_stack=1:report_signal_unsafe=0 OMP_NUM_THREADS=1 UCX_MEM_EVENTS=no" \
        -R "${SANITIZE_TSAN_TESTS:-^(train\.async_checkpoint_crash_resumes|test_column_parallel_overlap\.np2|test_communicator\.np2|test_watchdog\.np2|test_stop_signal\.np2)$}" || status=1 ;;
    *) echo "test-sanitize.sh: unknown '$s' (want asan or tsan)" >&2; exit 2 ;;
  esac
done
exit $status
