#!/usr/bin/env bash
# Checks that no file in src/X/ includes a project header from a layer above
# X, and that no library of src/X/ links one (target_link_libraries in the
# CMakeLists.txt files under src/; docs/architecture.md, "Layers"). The order is read from the line
#
#   Layer order (lowest first): core < kernels < ... < bench, inference < plan
#
# of docs/architecture.md: '<' separates ranks, ',' folders of one rank,
# which may not include each other. A project header is an include in
# quotes whose first path component is a layer ("model/transformer.hpp";
# the generated "examoe/core/version.hpp" counts as core). A folder of src/
# missing from the order is an error too: place it in the order first.
#
#   scripts/check-layering.sh [ROOT]    # ROOT: the source tree (default: this one)
#
# Exit 0 when clean; 1 with one line per offending include
# (file:line: #include "X/...": the rule broken) or link (CMakeLists.txt:line:
# links examoe_Y: ...); 2 when the order is missing.
set -uo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
doc=$root/docs/architecture.md
[ -f "$doc" ] || { echo "check-layering: $doc not found" >&2; exit 2; }
order=$(grep -m1 '^Layer order (lowest first):' "$doc" | sed 's/^Layer order (lowest first)://')
[ -n "$order" ] || {
  echo "check-layering: no 'Layer order (lowest first): a < b < ...' line in $doc" >&2
  exit 2
}
[ -d "$root/src" ] || { echo "check-layering: $root/src not found" >&2; exit 2; }

cd "$root" || exit 2
# The order parsed once for both checks: "folder rank" lines (rank 1 is the
# lowest), and the order as messages show it.
ranks=$(echo "$order" | awk '{
  nr = split($0, r, "<")
  for (k = 1; k <= nr; ++k) {
    nf = split(r[k], f, ",")
    for (i = 1; i <= nf; ++i) { n = f[i]; gsub(/[[:space:]]/, "", n); if (n != "") print n, k }
  }
}')
shown=$(echo "$order" | sed -E 's/[[:space:]]+/ /g; s/^ //; s/ $//')
# Both awk programs start by loading `ranks` into rank[folder].
load_ranks='function load_ranks(text,   l, n, i, kv) {
  n = split(text, l, "\n")
  for (i = 1; i <= n; ++i) { split(l[i], kv, " "); if (kv[1] != "") rank[kv[1]] = kv[2] + 0 }
}'
# Every include in quotes under src/, as path:line:text; awk does the rest.
grep -rnE --include='*.hpp' --include='*.cpp' --include='*.h' --include='*.cu' --include='*.in' \
     '^[[:space:]]*#[[:space:]]*include[[:space:]]*"' src |
RANKS=$ranks SHOWN=$shown FOLDERS=$(cd src && find . -mindepth 1 -maxdepth 1 -type d | sed 's|^\./||' | sort) awk "$load_ranks"'
BEGIN {
  load_ranks(ENVIRON["RANKS"])
  shown = ENVIRON["SHOWN"]
  bad = 0
  n = split(ENVIRON["FOLDERS"], dirs, "\n")
  for (i = 1; i <= n; ++i) {
    if (dirs[i] == "" || dirs[i] in rank) continue
    printf "src/%s/: not in the layer order of docs/architecture.md (%s): add it there\n", dirs[i], shown
    bad = 1
  }
}
{
  # path:line:text (the path has no colon: it is under src/).
  c1 = index($0, ":"); path = substr($0, 1, c1 - 1); rest = substr($0, c1 + 1)
  c2 = index(rest, ":"); line = substr(rest, 1, c2 - 1); text = substr(rest, c2 + 1)
  split(path, p, "/"); from = p[2]
  if (!(from in rank)) next  # a file directly in src/, or a folder reported above
  q = index(text, "\""); inc = substr(text, q + 1); inc = substr(inc, 1, index(inc, "\"") - 1)
  target = inc
  sub(/^examoe\//, "", target)
  if (index(target, "/") == 0) next  # a sibling header ("gemm_impl.hpp")
  to = substr(target, 1, index(target, "/") - 1)
  if (!(to in rank) || to == from) next  # not a project header, or its own layer
  if (rank[to] > rank[from])
    printf "%s:%s: #include \"%s\": %s may not include %s (a layer above it: %s)\n", path, line, inc, from, to, shown
  else if (rank[to] == rank[from])
    printf "%s:%s: #include \"%s\": %s and %s are on the same layer and may not include each other (%s)\n",
           path, line, inc, from, to, shown
  else
    next
  bad = 1
}
END { exit bad }
'
rc=${PIPESTATUS[1]}

# Links: a library of src/X/ (exa_library or add_library in a CMakeLists.txt
# under src/X/) may link only libraries of layers below X. A link can make a
# higher layer's symbols available without any #include, so the include
# check alone cannot see it.
cmakes=$(find src -name CMakeLists.txt | sort)
libs=$(for f in $cmakes; do
         dir=${f#src/}; dir=${dir%%/*}; [ "$dir" = CMakeLists.txt ] && continue
         sed -nE 's/^[[:space:]]*(exa_library|add_library)\([[:space:]]*([A-Za-z0-9_]+).*/\2 '"$dir"'/p' "$f"
       done)
link_bad=$(for f in $cmakes; do
  dir=${f#src/}; dir=${dir%%/*}; [ "$dir" = CMakeLists.txt ] && continue
  RANKS=$ranks awk -v file="$f" -v from="$dir" -v libs="$libs" "$load_ranks"'
    BEGIN {
      load_ranks(ENVIRON["RANKS"])
      nl = split(libs, ll, "\n")
      for (i = 1; i <= nl; ++i) { split(ll[i], kv, " "); if (kv[1] != "") home[kv[1]] = kv[2] }
    }
    /target_link_libraries[[:space:]]*\(/ { start = FNR; text = "" }
    start {
      text = text " " $0
      if (!index($0, ")")) next
      n = split(text, tok, /[[:space:]()]+/)
      first = 0
      for (i = 1; i <= n; ++i) {
        t = tok[i]
        if (t == "" || t ~ /^target_link_libraries$/) continue
        if (!first) { first = 1; continue }  # the target itself
        sub(/^ExaMoE::/, "", t)
        if (!(t in home)) continue  # not an ExaMoE library
        to = home[t]
        if (!(from in rank) || !(to in rank) || to == from) continue
        if (rank[to] > rank[from])
          printf "%s:%d: links %s: %s may not link %s (a layer above it)\n", file, start, t, from, to
        else if (rank[to] == rank[from])
          printf "%s:%d: links %s: %s and %s are on the same layer and may not link each other\n", file, start, t, from, to
      }
      start = 0
    }' "$f"
done)
if [ -n "$link_bad" ]; then
  echo "$link_bad"
  rc=1
fi
if [ $rc -eq 0 ]; then
  echo "check-layering: ok (src/ follows docs/architecture.md's layer order)"
else
  echo "check-layering: FAILED (docs/architecture.md, \"Layers\"): move the code, or the piece both sides share" \
       "(a type, a callback), down a layer; place a new src/ folder in the order" >&2
fi
exit $rc
