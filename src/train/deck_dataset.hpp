#pragma once
// The deck's training corpus ([data]), as the trainer and the benchmark open
// it: a relative data.path (and data.tokenizer) is looked up from the
// working directory first, then from the source tree the binary was built
// from (so the quick start and the benchmarks work from any directory).
#include <string>

#include "core/deck/config.hpp"
#include "io/dataset.hpp"
#include "io/sampler.hpp"
#include "io/stream_mixture.hpp"

namespace exa::train {

// Also checks data.tokenizer, when set, against model.vocab_size.
io::Dataset open_deck_dataset(const deck::Config& cfg);

// A data file's path as the run opens it: a relative path absent from the
// working directory is taken from the source tree (the bundled corpora).
std::string resolve_data_path(const std::string& path);

// The dataset and its sampler: data.documents = "packed" packs the
// documents (a text's blank-line-separated ones, a shard's SHARD.docs
// index; HDF5 has none) with train.seed's draws.
io::Sampler open_deck_sampler(const deck::Config& cfg);
// The same over a dataset already open (its errors name data.documents).
io::Sampler deck_sampler(const deck::Config& cfg, io::Dataset data);

// The deck's data as a mixture: its [[data.streams]] (each opened and
// sampled as above, with its own path and format), or data.path alone as
// one stream (task "data").
io::StreamMixture open_deck_streams(const deck::Config& cfg);

// Tokens per byte of the validation text, for reporting the validation loss
// in bits per byte: 1 for byte-level text; for a shard with data.tokenizer,
// its validation tokens over the bytes they decode to (each document's own
// bytes); 0 when unknown (a shard without a tokenizer, HDF5, several
// streams).
double validation_tokens_per_byte(const deck::Config& cfg, const io::StreamMixture& data);

// data.tokenizer resolved as above; empty when it is "none".
std::string deck_tokenizer_path(const deck::Config& cfg);

}  // namespace exa::train
