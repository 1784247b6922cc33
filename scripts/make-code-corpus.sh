#!/usr/bin/env bash
# Regenerates data/code.txt byte for byte: ExaMoE's own Kokkos kernel headers
# (src/kernels/*.hpp) as they were at commit 15eafe3, concatenated in name
# order, each preceded by a "// ==== FILE ====" line. A third domain for the
# federated example (input/federated.toml): C++ source, far from the Jargon
# File's prose and the licences' legal English.
#
#   scripts/make-code-corpus.sh [OUT]      # default data/code.txt
set -euo pipefail
cd "$(dirname "$0")/.."
rev=15eafe3
out=${1:-data/code.txt}
files=$(git ls-tree --name-only "$rev" src/kernels/ | grep '\.hpp$' | LC_ALL=C sort)
{
  for f in $files; do
    printf '// ==== %s ====\n' "$f"
    git show "$rev:$f"
    printf '\n'
  done
} > "$out"
echo "wrote $out: $(wc -c < "$out") bytes, sha256 $(sha256sum "$out" | cut -d' ' -f1)"
