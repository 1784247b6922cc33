#!/usr/bin/env bash
# Runs a command for a ctest test that must both exit 0 and print a given
# line: PASS_REGULAR_EXPRESSION alone makes ctest ignore the exit code, so
# a benchmark that printed its JSON record and then crashed would pass.
#
#   expect_output.sh REGEX COMMAND [ARGS...]
#
# REGEX is an extended regular expression (grep -E) that some line of the
# command's output (stdout and stderr) must match. Exits 0 when both hold,
# 1 otherwise, saying which failed; the command's output is passed through.
set -uo pipefail
if [ $# -lt 2 ]; then
  echo "usage: expect_output.sh REGEX COMMAND [ARGS...]" >&2
  exit 2
fi
re=$1; shift
out=$(mktemp)
trap 'rm -f "$out"' EXIT
"$@" 2>&1 | tee "$out"
rc=${PIPESTATUS[0]}
if [ "$rc" -ne 0 ]; then
  echo "expect_output.sh: FAIL: $1 exited with status $rc (output above)" >&2
  exit 1
fi
if ! grep -Eq -- "$re" "$out"; then
  echo "expect_output.sh: FAIL: $1 exited 0, but no line of its output matches: $re" >&2
  exit 1
fi
echo "expect_output.sh: $1 exited 0 and printed a line matching: $re"
