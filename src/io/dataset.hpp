#pragma once
// Dataset: the deck's token source split into training and validation.
//
// Tokens [0, n_train) are for training and [n_train, n) are held out: the
// split is by position, at the end of the data, so no training window can
// ever include a validation token, and it is the same on every rank and in
// every layout because it depends only on the file and the deck.
#include <cstdint>
#include <string>

#include "io/token_h5.hpp"
#include "io/token_store.hpp"

namespace exa::deck {
class Config;
}

namespace exa::io {

enum class DataFormat { text, shard, hdf5 };
DataFormat parse_data_format(const std::string& name);  // "text" | "shard" | "hdf5"

struct DataSpec {
  std::string path = "data/corpus.txt";
  DataFormat format = DataFormat::text;
  std::string h5_dataset = kDefaultH5Dataset;
  double val_fraction = 0.05;     // share of the tokens held out (0 = no validation)
  std::int64_t seq_len = 256;     // T: a sample is a window of T + 1 tokens
  std::int64_t vocab_size = 256;  // the model's V: every token must be below it
};

// data.path, data.format, data.val_fraction, model.seq_len, model.vocab_size.
DataSpec data_spec_from_deck(const deck::Config& cfg);

class Dataset {
 public:
  // Reads the source `spec` names (text: bytes; shard; HDF5) and splits it.
  static Dataset open(const DataSpec& spec);
  // Splits tokens already read. The held-out part is the last
  // ceil(val_fraction * n) tokens, but at least seq_len + 1 when
  // val_fraction > 0, so there is always one validation window; exa::Error
  // when what is left for training is shorter than one window, or when the
  // data's vocabulary exceeds `model_vocab`.
  Dataset(TokenStore tokens, double val_fraction, std::int64_t seq_len, std::int64_t model_vocab);

  const TokenStore& tokens() const { return tokens_; }
  std::int64_t seq_len() const { return seq_len_; }
  std::int64_t n_tokens() const { return tokens_.size(); }
  std::int64_t n_train() const { return n_train_; }                 // tokens [0, n_train)
  std::int64_t n_val() const { return tokens_.size() - n_train_; }  // tokens [n_train, n)

  // The window of T + 1 tokens at `start`: inputs = tokens[start, start + T),
  // targets = tokens[start + 1, start + T + 1) (next-token prediction).
  void window(std::int64_t start, std::int32_t* inputs, std::int32_t* targets) const;

 private:
  TokenStore tokens_;
  std::int64_t seq_len_ = 0, n_train_ = 0;
};

}  // namespace exa::io
