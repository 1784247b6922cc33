#!/usr/bin/env bash
# The repository speaks of the project alone: code, comments, docs and
# scripts say what the code does, not which work item or which working
# arrangement produced it. This check greps every tracked file of a git
# checkout (the working-tree contents of `git ls-files`) for such words and
# fails naming each hit.
#
#   tests/docs/process_words.sh SOURCE_DIR
#
# Exit 0: none found; 1: hits (listed, with the fix); 77: SOURCE_DIR is not
# a git checkout (a source copy without .git: ctest reports it skipped).
# A legitimate use goes into `exceptions` below with its reason.
set -uo pipefail
root=${1:?usage: process_words.sh SOURCE_DIR}
if ! git -C "$root" rev-parse --is-inside-work-tree >/dev/null 2>&1; then
  echo "SKIP: $root is not a git checkout: no list of tracked files to check"
  exit 77
fi

# Perl regexes, matched case-insensitively; each names a work unit or the
# working arrangement rather than the code.
patterns=(
  '\bissue #?[0-9]'                 # "issue 4", "issue #12": a work item; say what the thing does
  '\bthe (performance )?issue\b'    # "the issue's 60%", "the performance issue asks": a target's source
  '\bstops?[- ]#?[0-9]+\b'          # "stop 21", "the stop-20 merges": a unit of work, not a date
  '\bthis stop\b(?! signal)'        # "in this stop" (a stop signal is the product's own word)
  '\bsessions?\b'                   # "this session's machine"
  '\bhelper-[0-9]'                  # a worker's name
  '\bother agents?\b'               # who else used the machine: give the load average instead
  '\bthe reviewer\b'
  '\btickets? #?[0-9]'
  '\.\./shared\b'                   # a directory beside the checkout that users do not have
)
# "path|Perl regex of the allowed line|reason": a hit in that file whose line
# also matches the regex is a legitimate use.
exceptions=(
  'tests/batch/pbs_rerun.sh|session|POSIX sessions (setsid): the test runs each job in one, as PBS does'
  'scripts/test-spack.sh|^snapshot=\$\{EXAMOE_SPACK:-\$root/\.\./shared/tools/spack\}$|the default place of the offline Spack snapshot CI provides; EXAMOE_SPACK overrides it'
)
# Whole files: third-party text and this script, which spells the patterns.
skip_files='^(data/corpus\.txt|tests/docs/process_words\.sh)$'

regex="(?i)(?:$(IFS='|'; echo "${patterns[*]}"))"
hits=$(cd "$root" && git ls-files -z | grep -zEv "$skip_files" | xargs -0 grep -nIHsP -- "$regex")
bad=()
while IFS= read -r hit; do
  [ -n "$hit" ] || continue
  path=${hit%%:*}; rest=${hit#*:}; text=${rest#*:}
  allowed=""
  for e in "${exceptions[@]}"; do
    # path|regex|reason: the regex may hold '|' itself.
    epath=${e%%|*}; eregex=${e#*|}; eregex=${eregex%|*}
    if [ "$path" = "$epath" ] && grep -qP -- "$eregex" <<<"$text"; then allowed=1; break; fi
  done
  [ -n "$allowed" ] || bad+=("$hit")
done <<<"$hits"

if [ ${#bad[@]} -gt 0 ]; then
  printf '%s\n' "${bad[@]}"
  echo "process_words.sh: FAIL: ${#bad[@]} line(s) above name a work item or the working arrangement" \
       "instead of the project: say what the code does (dates and commands for measurements; pointers" \
       "to README.md or docs/architecture.md), or, for a legitimate use, add an exception with its" \
       "reason to tests/docs/process_words.sh" >&2
  exit 1
fi
echo "process_words.sh: no process words in $(cd "$root" && git ls-files | grep -cEv "$skip_files") tracked files"
