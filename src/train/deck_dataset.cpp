#include "train/deck_dataset.hpp"

#include <filesystem>

namespace exa::train {

io::Dataset open_deck_dataset(const deck::Config& cfg) {
  namespace fs = std::filesystem;
  io::DataSpec spec = io::data_spec_from_deck(cfg);
  if (fs::path(spec.path).is_relative() && !fs::exists(spec.path)) {
    const fs::path alt = fs::path(EXAMOE_SOURCE_DIR) / spec.path;
    if (fs::exists(alt)) spec.path = alt.string();
  }
  return io::Dataset::open(spec);
}

}  // namespace exa::train
