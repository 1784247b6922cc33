#include "io/dataset.hpp"

#include <algorithm>
#include <cmath>
#include <utility>

#include "core/deck/config.hpp"
#include "core/error.hpp"
#include "io/token_shard.hpp"
#include "io/token_text.hpp"

namespace exa::io {

DataFormat parse_data_format(const std::string& name) {
  if (name == "text") return DataFormat::text;
  if (name == "shard") return DataFormat::shard;
  if (name == "hdf5") return DataFormat::hdf5;
  throw Error(fmt::format("data format '{}' is not known; use text, shard or hdf5", name));
}

DataSpec data_spec_from_deck(const deck::Config& cfg) {
  DataSpec s;
  s.path = cfg.get_string("data.path");
  s.format = parse_data_format(cfg.get_string("data.format"));
  s.val_fraction = cfg.get_float("data.val_fraction");
  s.seq_len = cfg.get_int("model.seq_len");
  s.vocab_size = cfg.get_int("model.vocab_size");
  return s;
}

Dataset Dataset::open(const DataSpec& spec) {
  switch (spec.format) {
    case DataFormat::text:
      return Dataset(read_text_tokens(spec.path), spec.val_fraction, spec.seq_len, spec.vocab_size);
    case DataFormat::shard:
      return Dataset(read_shard(spec.path), spec.val_fraction, spec.seq_len, spec.vocab_size);
    case DataFormat::hdf5:
      return Dataset(read_h5_tokens(spec.path, spec.h5_dataset, spec.vocab_size), spec.val_fraction, spec.seq_len,
                     spec.vocab_size);
  }
  EXA_ASSERT(false);
  return Dataset(TokenStore(), 0, 0, 0);
}

Dataset::Dataset(TokenStore tokens, double val_fraction, std::int64_t seq_len, std::int64_t model_vocab)
    : tokens_(std::move(tokens)), seq_len_(seq_len) {
  EXA_ASSERT(seq_len >= 1 && val_fraction >= 0 && val_fraction < 1);
  const std::string& src = tokens_.source();
  EXA_REQUIRE(tokens_.vocab() <= model_vocab,
              "{}: the data's vocabulary size is {} but model.vocab_size = {}; set model.vocab_size = {}", src,
              tokens_.vocab(), model_vocab, tokens_.vocab());
  const std::int64_t n = tokens_.size();
  std::int64_t n_val = 0;
  if (val_fraction > 0) {
    n_val = std::max(static_cast<std::int64_t>(std::ceil(val_fraction * static_cast<double>(n))), seq_len + 1);
    n_val = std::min(n_val, n);
  }
  n_train_ = n - n_val;
  EXA_REQUIRE(n_train_ >= seq_len + 1,
              "{}: {} tokens are too few for model.seq_len = {}: training needs at least {} tokens (seq_len + 1) "
              "after {} are held out for validation (data.val_fraction = {}); use more data or a smaller "
              "model.seq_len",
              src, n, seq_len, seq_len + 1, n_val, val_fraction);
}

void Dataset::window(std::int64_t start, std::int32_t* inputs, std::int32_t* targets) const {
  tokens_.copy(start, seq_len_, inputs);
  tokens_.copy(start + 1, seq_len_, targets);
}

}  // namespace exa::io
