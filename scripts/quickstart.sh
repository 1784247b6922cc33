#!/usr/bin/env bash
# Sets everything up (Debian packages, Serial build) and runs the main job:
# train the default deck on the bundled corpus under mpiexec.
#   scripts/quickstart.sh [NRANKS] [extra examoe args...]
#
# Builds only the program it runs (the `examoe` target; `scripts/test.sh`
# or `make` in build/ builds the rest), and says what it is doing at each
# phase: packages, configure, build (with its percentage), training, then
# the elapsed time.
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
np=${1:-1}; shift || true
t0=$SECONDS
mmss() { printf '%d min %02d s' $(($1 / 60)) $(($1 % 60)); }
phase() { echo "[quickstart] $* ($(mmss $((SECONDS - t0))) elapsed)"; }

phase "1/4 Debian packages (scripts/deps-debian.sh; nothing to do when installed)"
"$root/scripts/deps-debian.sh"
phase "2/4 configure build/ (Serial Kokkos, unity build)"
EXAMOE_UNITY_BUILD=${EXAMOE_UNITY_BUILD:-ON} TARGETS=none "$root/scripts/setup.sh" serial
phase "3/4 build the examoe program"
EXAMOE_UNITY_BUILD=${EXAMOE_UNITY_BUILD:-ON} TARGETS=examoe EXAMOE_PROGRESS=ON "$root/scripts/setup.sh" serial
phase "4/4 train input/tiny.toml on $np rank(s): mpiexec -n $np build/bin/examoe input/tiny.toml $*"
cd "$root"
rc=0
mpiexec -n "$np" build/bin/examoe input/tiny.toml "$@" || rc=$?
echo "[quickstart] done: examoe exited with $rc after $(mmss $((SECONDS - t0))) in all"
exit "$rc"
