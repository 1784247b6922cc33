#!/usr/bin/env bash
# examoe-ckpt on the drivers fixture's run: `inspect` prints the metadata and
# the tensor table, `verify` passes (exit 0); on a copy with one byte of a
# dataset flipped, `verify` exits 2 naming the file, dataset and chunk, and
# on a copy cut in half it fails with a message naming the file.
#   ckpt_tool.sh EXAMOE_CKPT RUN_DIR WORK
set -u
tool=$1 run=$2 work=$3
fail() { echo "ckpt_tool.sh: $*" >&2; exit 1; }
rm -rf "$work" && mkdir -p "$work" || fail "cannot make $work"

out=$("$tool" inspect "$run" --deck) || fail "inspect failed: $out"
for want in "layout" "chunk_elements     65536" "/model/embed.weight" \
            "/optim/exp_avg_sq/lm_head.weight" "deck:"; do
  grep -qF -- "$want" <<<"$out" || fail "inspect printed no '$want':"$'\n'"$out"
done
out=$("$tool" verify "$run") || fail "verify of an intact checkpoint failed: $out"
grep -q "^OK: .*state.h5: metadata, Merkle roots and [0-9]* datasets" <<<"$out" || fail "verify printed: $out"

# A flipped byte in the last 1/8 of the file: raw data (the optim moments),
# written after the metadata.
cp -r "$(readlink -f "$run/ckpt/latest")" "$work/flip" || fail "cannot copy the checkpoint"
f=$work/flip/state.h5
size=$(stat -c %s "$f")
at=$((size - size / 16))
byte=$(od -An -tu1 -j "$at" -N1 "$f" | tr -d ' ')
printf "$(printf '\\%03o' $(((byte ^ 16) & 255)))" | dd of="$f" bs=1 seek="$at" conv=notrunc status=none
out=$("$tool" verify "$work/flip" 2>&1)
rc=$?
[ "$rc" -eq 2 ] || fail "verify of a flipped byte exited $rc, not 2: $out"
grep -q "^CORRUPT: .*state.h5: dataset /optim/.* chunk 0 (elements \[0, [0-9]*)) reads back" <<<"$out" \
  || fail "verify did not name the dataset and chunk: $out"

cp -r "$work/flip" "$work/cut" && truncate -s $((size / 2)) "$work/cut/state.h5"
out=$("$tool" verify "$work/cut" 2>&1)
rc=$?
[ "$rc" -eq 1 ] && grep -q "examoe-ckpt: error: .*cut/state.h5" <<<"$out" || fail "verify of a cut file ($rc): $out"
"$tool" verify "$work/none" >/dev/null 2>&1 && fail "verify of a missing directory passed"
echo "ckpt_tool.sh: inspect, verify, a flipped byte and a cut file as expected"
