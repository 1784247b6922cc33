#!/usr/bin/env bash
# input/bpe.toml end to end, as its header says: examoe-tokenize builds the
# 4096-token BPE vocabulary of the bundled corpus and encodes it (shard and
# document index), the deck validates against that shard and trains a few
# steps on it, and examoe-generate continues a prompt through the tokenizer
# (and, without it, says to pass it). A build without SentencePiece exits
# 77 (skipped, not passed).
#
#   tokenize_bpe.sh EXAMOE_TOKENIZE EXAMOE EXAMOE_GENERATE SRC WORK
set -euo pipefail
tokenize=$1 examoe=$2 generate=$3 src=$4 work=$5
rm -rf "$work" && mkdir -p "$work"
if ! out=$("$tokenize" train --vocab 4096 --out "$work/bpe4k" --encode "$src/data/corpus.txt" 2>"$work/err"); then
  if grep -q "has no SentencePiece" "$work/err"; then cat "$work/err"; exit 77; fi
  cat "$work/err" >&2; exit 1
fi
echo "$out"
# The bundled corpus has 11,857 blank-line-separated documents.
grep -q "in 11857 documents" <<<"$out" || { echo "FAIL: expected 11857 documents" >&2; exit 1; }
for f in bpe4k.model bpe4k.tok bpe4k.tok.docs; do
  [ -s "$work/$f" ] || { echo "FAIL: $f was not written" >&2; exit 1; }
done
deck=("$src/input/bpe.toml" --set data.path="$work/bpe4k.tok" --set data.tokenizer="$work/bpe4k.model")
"$examoe" "${deck[@]}" --check --set output.run_dir="$work/run" >"$work/check.log" \
  || { cat "$work/check.log" >&2; exit 1; }
"$examoe" "${deck[@]}" --set train.steps=3 --set train.log_every=1 --set train.eval_every=3 \
  --set model.d_model=32 --set model.n_layers=1 --set checkpoint.every=3 --set output.run_dir="$work/run" \
  >"$work/train.log" 2>&1 || { cat "$work/train.log" >&2; exit 1; }
grep -E "step +3/3 \| loss [0-9]" "$work/train.log" || { cat "$work/train.log" >&2; exit 1; }
# Its validation loss also in bits per byte (the tokenizer decodes the
# validation tokens), comparable with a byte-level run's.
grep -E "step +3/3 \| loss [0-9.]+ \| val [0-9.]+ \([0-9.]+ bpb\)" "$work/train.log" \
  || { echo "FAIL: no validation loss in bits per byte" >&2; cat "$work/train.log" >&2; exit 1; }
gen=("$generate" --checkpoint "$work/run" --prompt "The hacker" --max-new-tokens 6 --seed 1)
# The checkpoint's deck names the tokenizer (data.tokenizer): no option needed.
text=$("${gen[@]}" 2>"$work/gen.err") || { cat "$work/gen.err" >&2; exit 1; }
echo "generated: $text"
[[ "$text" == "The hacker"* && ${#text} -gt 10 ]] || { echo "FAIL: no continuation of the prompt" >&2; exit 1; }
# A deck whose tokenizer does not match the model is refused at start.
if "$examoe" "${deck[@]}" --check --set model.vocab_size=512 >/dev/null 2>"$work/check.err"; then
  echo "FAIL: a tokenizer of another vocabulary was accepted" >&2; exit 1
fi
grep -q "has 4096 tokens but model.vocab_size = 512" "$work/check.err" || { cat "$work/check.err" >&2; exit 1; }
# Without a tokenizer anywhere, generate says to pass one.
"$examoe" "${deck[@]}" --set data.tokenizer=none --set train.steps=3 --set model.d_model=32 --set model.n_layers=1 \
  --set checkpoint.every=3 --set train.eval_every=0 --set output.run_dir="$work/run_bare" >/dev/null 2>&1
if "$generate" --checkpoint "$work/run_bare" --prompt "The" --max-new-tokens 2 --seed 1 >/dev/null 2>"$work/gen.err"; then
  echo "FAIL: a subword model generated without its tokenizer" >&2; exit 1
fi
grep -q "pass --tokenizer MODEL" "$work/gen.err" || { cat "$work/gen.err" >&2; exit 1; }
# examoe eval encodes a text file through the checkpoint's tokenizer: the
# same cross-entropy as on the shard examoe-tokenize encodes from it; a
# subword checkpoint without a tokenizer refuses text.
"$tokenize" encode --model "$work/bpe4k.model" -o "$work/legal.tok" "$src/data/legal.txt" >/dev/null
ce_of() { sed -n 's/.*"ce_nats_per_token":\([0-9.e+-]*\).*/\1/p'; }
ce_text=$("$examoe" eval --checkpoint "$work/run" --tokens "$src/data/legal.txt" | ce_of)
ce_shard=$("$examoe" eval --checkpoint "$work/run" --tokens "$work/legal.tok" | ce_of)
[[ -n "$ce_text" && "$ce_text" == "$ce_shard" ]] \
  || { echo "FAIL: eval of the text ($ce_text) and of its shard ($ce_shard) differ" >&2; exit 1; }
if "$examoe" eval --checkpoint "$work/run_bare" --tokens "$src/data/legal.txt" >/dev/null 2>"$work/eval.err"; then
  echo "FAIL: a subword checkpoint evaluated text as bytes" >&2; exit 1
fi
grep -q "pass --tokenizer MODEL" "$work/eval.err" || { cat "$work/eval.err" >&2; exit 1; }
echo "bpe.toml: tokenized, checked, trained 3 steps, generated and evaluated text (ce $ce_text)"
