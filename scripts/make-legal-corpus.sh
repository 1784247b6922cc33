#!/usr/bin/env bash
# Regenerates data/legal.txt, the fine-tuning example's domain corpus
# (data/README.md): the GNU licence texts Debian ships in base-files'
# /usr/share/common-licenses, verbatim and concatenated. Their notice
# permits verbatim copies, so they are shipped unchanged.
set -euo pipefail
src=/usr/share/common-licenses
out="$(cd "$(dirname "$0")/.." && pwd)/data/legal.txt"
: > "$out"
for f in GPL-3 GPL-2 LGPL-3 LGPL-2.1 GFDL-1.3; do
  [ -r "$src/$f" ] || { echo "make-legal-corpus: $src/$f is missing (Debian's base-files ships it)" >&2; exit 1; }
  cat "$src/$f" >> "$out"
  printf '\n' >> "$out"
done
sha256sum "$out"
