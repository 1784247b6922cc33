#pragma once
// The deck's training corpus ([data]), as the trainer and the benchmark open
// it: a relative data.path (and data.tokenizer) is looked up from the
// working directory first, then from the source tree the binary was built
// from (so the quick start and the benchmarks work from any directory).
#include <string>

#include "core/deck/config.hpp"
#include "io/dataset.hpp"

namespace exa::train {

// Also checks data.tokenizer, when set, against model.vocab_size.
io::Dataset open_deck_dataset(const deck::Config& cfg);

// data.tokenizer resolved as above; empty when it is "none".
std::string deck_tokenizer_path(const deck::Config& cfg);

}  // namespace exa::train
