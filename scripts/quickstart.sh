#!/usr/bin/env bash
# Sets everything up (Debian packages, Serial build) and runs the main job:
# train the default deck on the bundled corpus under mpiexec.
#   scripts/quickstart.sh [NRANKS] [extra examoe args...]
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
np=${1:-1}; shift || true
EXAMOE_UNITY_BUILD=${EXAMOE_UNITY_BUILD:-ON} "$root/scripts/setup.sh" serial
cd "$root"
exec mpiexec -n "$np" build/bin/examoe input/tiny.toml "$@"
