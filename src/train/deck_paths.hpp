#pragma once
// Where the deck puts a run's files, for the Trainer and `examoe --check`.
#include <filesystem>
#include <string>

#include "core/deck/config.hpp"

namespace exa::train {

// The directory deck key `key` names; a relative one is taken under output.run_dir.
inline std::string deck_run_path(const deck::Config& cfg, const char* key) {
  const std::filesystem::path d = cfg.get_string(key);
  return (d.is_absolute() ? d : std::filesystem::path(cfg.get_string("output.run_dir")) / d).string();
}

// checkpoint.dir (tier 2).
inline std::string deck_checkpoint_dir(const deck::Config& cfg) { return deck_run_path(cfg, "checkpoint.dir"); }

// checkpoint.local_dir (tier 1).
inline std::string deck_local_checkpoint_dir(const deck::Config& cfg) {
  return deck_run_path(cfg, "checkpoint.local_dir");
}

}  // namespace exa::train
