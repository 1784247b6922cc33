#pragma once
// `examoe-generate`: autoregressive sampling from a checkpoint's model.
//
// Tokens are bytes (V = 256 models; the prompt's bytes are its tokens and
// every sampled token is written out as one byte), or, with `tokenizer` (a
// SentencePiece model, io/tokenizer.hpp), its subwords: the prompt is
// encoded and the continuation decoded. Each step runs the model
// on the context (the last seq_len tokens of prompt + continuation so far)
// and samples the next token from the logits of its last position:
//   temperature 0      greedy (argmax; the lowest token id on ties)
//   temperature t > 0  softmax(logits / t) restricted to the top_k largest
//                      logits (top_k 0 or >= V: all of them)
// The uniform draw of step i is Philox(seed, i): the same seed gives the same
// text on any machine and rank count.
//
// The model runs dropless (capacity_factor 0, as the transformer advises for
// generation) on a fixed window of min(seq_len, prompt + max_new_tokens)
// positions; positions after the current one are padding, which a causal
// model ignores, so the window never needs to be reallocated.
#include <mpi.h>

#include <cstdint>
#include <string>
#include <vector>

namespace exa::inference {

struct GenerateOptions {
  std::string checkpoint;
  std::string prompt;
  std::int64_t max_new_tokens = 200;
  double temperature = 0.8;
  std::int64_t top_k = 40;
  std::uint64_t seed = 0;
  // --tokenizer: the model's SentencePiece model (empty: the checkpoint
  // deck's data.tokenizer, else bytes).
  std::string tokenizer;
  // Pipeline stages (--pp): each rank loads and runs only its stage's
  // layers, so a model that needs several ranks to train generates on them
  // too. It must divide the ranks; the text is the same as on one rank.
  int pp = 1;
};

// Samples one token from `logits` (V entries) as described above, using the
// uniform draw u in (0, 1]. Pure function (unit-testable).
std::int32_t sample_token(const std::vector<float>& logits, double temperature, std::int64_t top_k, double u);

// Prompt + continuation as bytes. Collective over `comm` (every rank loads
// the model, or its pipeline stage of it, and all compute the same text).
// exa::Error for an empty prompt, a negative temperature, top_k or
// max_new_tokens, a pp that does not divide the ranks or exceeds the
// layers, or a model whose vocabulary is not bytes.
std::string generate(const GenerateOptions& opt, MPI_Comm comm);

}  // namespace exa::inference
