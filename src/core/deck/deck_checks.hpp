#pragma once
// Consistency checks across keys: the parallel layout against the number of
// ranks, divisibility the model and the parallel strategies need, and
// combinations that cannot work. Run after every key passed its own checks.
#include <string>
#include <vector>

#include "core/deck/config.hpp"

namespace exa::deck {

// pp*dp*cp*tp against config.world_size() (dp = 0 is inferred later, so
// here only pp*cp*tp must divide the world).
void check_world(const Config& config);

// Everything else; runs on resolved values (resolve.hpp), so dp, n_kv_heads
// and microbatches are never 0 here.
void check_consistency(const Config& config);

// The layout keys parallel.auto chooses (every [parallel] and [pipeline]
// key of the layout), and whether a setting asks for a value of its own
// (from the deck's text, or with `overrides_too` also from a --set): not
// the default, and not a default ExaMoE resolved (dp = 0).
const std::vector<std::string>& auto_layout_keys();
bool sets_layout_key(const Setting& s, bool overrides_too);

// "4, 4.5,0" -> {4, 4.5, 0} (a comma-separated list of numbers, such as
// moe.bias_init; empty text is an empty list). exa::Error naming the entry
// that is not a number.
std::vector<double> number_list(const std::string& text);

// "attention, dense_ffn" -> {"attention", "dense_ffn"}: comma-separated
// names, blanks around them dropped; exa::Error on an empty entry.
std::vector<std::string> name_list(const std::string& text);

// "a,,b" -> {"a", "", "b"}: comma-separated entries, blanks around them
// dropped, empty ones kept (so a check can name the one that is missing).
std::vector<std::string> comma_items(const std::string& text);

}  // namespace exa::deck
