#pragma once
// Where the deck puts a run's files, for the Trainer and `examoe --check`.
#include <filesystem>
#include <string>

#include "core/deck/config.hpp"

namespace exa::train {

// checkpoint.dir; a relative one is taken under output.run_dir.
inline std::string deck_checkpoint_dir(const deck::Config& cfg) {
  const std::filesystem::path d = cfg.get_string("checkpoint.dir");
  return (d.is_absolute() ? d : std::filesystem::path(cfg.get_string("output.run_dir")) / d).string();
}

}  // namespace exa::train
