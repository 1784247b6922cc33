#pragma once
// The deck schema: every key a deck may set, with its type, allowed range or
// values, default and a one-line doc. schema.cpp holds the one table; the
// loader, the checks, the dump and `examoe --help` all read it from here.
#include <string>
#include <string_view>
#include <vector>

#include "core/deck/value.hpp"

namespace exa::deck {

struct KeySpec {
  std::string section;  // "model"
  std::string key;      // "d_model"
  Type type;
  Value def;  // default; of type `type`
  // Int/Float: value must lie between lo and hi; an open end excludes the
  // bound itself (lr > 0). Unused for Bool/String.
  double lo = 0, hi = 0;
  bool lo_open = false, hi_open = false;
  // String: the allowed values; empty means any non-empty string (paths).
  std::vector<std::string> allowed;
  std::string doc;
  // What the schema names but this build cannot run yet: values of
  // `allowed` that are refused when the deck is loaded, at the line that
  // set them, so no run starts with a setting it would ignore.
  std::vector<std::string> not_built;
  // Values that only CUDA builds run (refused elsewhere, at the same place).
  std::vector<std::string> cuda_only;
  std::string cuda_only_why;  // why they need CUDA, for the refusal

  bool refuses(const Value& v) const;  // a not_built value, or a cuda_only one in a build without CUDA
  bool needs_cuda(const Value& v) const;  // a cuda_only value
  // A string key whose every value but the default is not built: a run
  // behaves the same whether or not anything reads it.
  bool only_default() const;

  std::string name() const { return section + "." + key; }  // "model.d_model"
};

// Every key, grouped by section in the order of sections().
const std::vector<KeySpec>& schema();

// The section names, in the order the dump prints them.
const std::vector<std::string>& sections();

bool is_section(std::string_view section);

// nullptr when [section] has no such key.
const KeySpec* find_key(std::string_view section, std::string_view key);

// nullptr unless `dotted` is "section.key" for a key in the schema.
const KeySpec* find_key(std::string_view dotted);

// Every key with its type, accepted values, default and doc, one per line,
// grouped by section: the reference `examoe --keys` prints.
std::string schema_reference();

// The same as Markdown, one table per section: docs/decks.md
// (`examoe --keys --format markdown`).
std::string schema_markdown();

}  // namespace exa::deck
