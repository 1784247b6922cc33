#pragma once
// The only place toml++ is used: turns deck text into a flat list of
// (section, key, value, line) entries in document order. Schema checks are
// not done here (load.cpp does them), so every deck problem but syntax is
// reported by code that knows nothing of the TOML library.
#include <optional>
#include <string>
#include <string_view>
#include <vector>

#include "core/deck/value.hpp"

namespace exa::deck {

struct RawEntry {
  std::string section;  // "" for a key outside any section
  std::string key;      // "" for a section header ([model]) itself
  int line = 0;
  int column = 0;
  std::optional<Value> value;  // empty for arrays, tables, dates and times
  std::string kind;            // "an integer", "a table", "an array", ...: for messages
  // The one array of tables a deck has, [[data.streams]]: its tables'
  // entries come with section "data.streams" and the table's index (a
  // header with an empty key first); -1 elsewhere.
  int index = -1;
};

// Throws exa::Error "<path>:<line>:<column>: TOML syntax error: ..." when the
// text is not TOML. Entries come sorted by position; a section's header comes
// before its keys.
std::vector<RawEntry> read_toml_deck(std::string_view text, const std::string& path);

}  // namespace exa::deck
