#pragma once
// Internal to the deck loader: the pieces (load.cpp, resolve.cpp) that build
// a Config reach its private state through here. Not part of the API.
#include <string>
#include <string_view>
#include <vector>

#include "core/deck/config.hpp"

namespace exa::deck {

struct ConfigAccess {
  // A Config holding every key at its default.
  static Config defaults(std::string text, std::string path, std::vector<std::string> overrides, int world_size);
  static Setting& at(Config& c, std::string_view key);
  static void forget_reads(Config& c);
  static std::vector<DataStream>& streams(Config& c) { return c.streams_; }
};

// "<path>:<line>:", "--set <raw>:" or "<path>:" (default): where a setting's
// value came from, as a message prefix.
std::string where(const Config& c, const Setting& s);

}  // namespace exa::deck
