#pragma once
// The deck's training corpus ([data]), as the trainer and the benchmark open
// it: a relative data.path is looked up from the working directory first,
// then from the source tree the binary was built from (so the quick start
// and the benchmarks work from any directory).
#include "core/deck/config.hpp"
#include "io/dataset.hpp"

namespace exa::train {

io::Dataset open_deck_dataset(const deck::Config& cfg);

}  // namespace exa::train
