#pragma once
// `examoe eval`: the mean cross-entropy of a checkpoint's model over a token
// file, in nats per token, without the auxiliary losses.
//
// The file's N tokens are cut into non-overlapping windows of T = seq_len
// predictions: window w has inputs tokens[wT, wT + T) and targets
// tokens[wT + 1, wT + T + 1), so every token but the first is predicted
// exactly once, with the context of its own window. The last window is
// shorter when N - 1 is not a multiple of T (it is evaluated as it is, not
// padded), so the windows cover the whole file: ceil((N - 1) / T) windows,
// N - 1 predictions. The file must hold at least T + 1 tokens (one full
// window).
//
// Under MPI the windows are split into contiguous blocks, one per rank; each
// rank holds the whole model and the per-rank sums are allreduced, so the
// result does not depend on the rank count (up to the order of the sums).
// With pp > 1 stages (EvalOptions::pp) the blocks go to the ranks / pp
// pipelines (inference/pipeline_ranks.hpp), each rank holding its stage.
#include <mpi.h>

#include <cstdint>
#include <string>

#include "io/token_store.hpp"

namespace exa::inference {

// Reads a token file for evaluation: a token shard (.tok, or any file
// starting with the shard magic), an HDF5 file (.h5/.hdf5, or any file with
// the HDF5 signature; 1-D dataset `h5_dataset`), else a text file tokenised
// at byte level. `vocab` is the model's vocabulary: exa::Error when the file
// holds a token >= vocab, or is missing or empty.
// With `tokenizer` (a SentencePiece model's path), a text file is encoded
// through it instead, document by document as examoe-tokenize encodes (its
// documents' tokens, each followed by the end-of-sequence token).
io::TokenStore read_token_file(const std::string& path, std::int64_t vocab,
                               const std::string& h5_dataset = "tokens", const std::string& tokenizer = "");

struct EvalOptions {
  std::string checkpoint;   // run dir, ckpt/ dir or step_<N> dir
  std::string tokens_file;
  // --tokenizer: encodes a text file (empty: the checkpoint deck's
  // data.tokenizer; a text file of a subword model needs one).
  std::string tokenizer;
  std::int64_t batch = 0;    // windows per forward pass; 0 = the checkpoint's train.micro_batch
  std::int64_t seq_len = 0;  // T; 0 = the model's seq_len
  // Pipeline stages (--pp): each rank loads and runs only its stage's
  // layers; the windows are split over the ranks / pp replicas.
  int pp = 1;
};

struct EvalReport {
  std::string checkpoint;   // the step directory that was read
  std::uint64_t step = 0;   // its training step
  std::string tokens_file;
  // --tokenizer: encodes a text file (empty: the checkpoint deck's
  // data.tokenizer; a text file of a subword model needs one).
  std::string tokenizer;
  std::int64_t tokens = 0;     // N, tokens in the file
  std::int64_t predicted = 0;  // N - 1 scored predictions
  std::int64_t windows = 0;
  std::int64_t seq_len = 0;
  std::int64_t batch = 0;
  double ce_sum = 0;           // summed over every prediction (nats)
  double ce_nats_per_token = 0;
  double ppl = 0;  // exp(ce_nats_per_token)
  std::string transport;  // the stages' transport under --pp (comm::make_transport), else "none"
};

// Collective over `comm`; every rank gets the same report.
EvalReport evaluate_checkpoint(const EvalOptions& opt, MPI_Comm comm);

// {"checkpoint":...,"tokens_file":...,"tokens":N,"windows":W,"seq_len":T,
//  "ce_nats_per_token":x,"ppl":exp(x),"step":S,"predicted":N-1,"batch":B}
// on one line (no trailing newline).
std::string to_json_line(const EvalReport& r);

}  // namespace exa::inference
