#pragma once
// Per-key checks and their messages, shared by deck entries and --set
// overrides: unknown sections and keys (with did-you-mean), type mismatches,
// out-of-range values and values outside an allowed set. Each returns the
// problem text without location; callers prefix "<file>:<line>: ".
#include <optional>
#include <string>
#include <string_view>

#include "core/deck/schema.hpp"
#include "core/deck/value.hpp"

namespace exa::deck {

// "unknown section [modle]; did you mean [model]?"
std::string unknown_section_problem(std::string_view section);

// "unknown key 'd_modle' in [model]; did you mean 'd_model'?"
std::string unknown_key_problem(std::string_view section, std::string_view key);

// Parses `text` as a value of type `t` the way --set reads it: integers in
// decimal, floats in any C++ form (integers accepted), true/false, and any
// text for strings. Empty when it does not parse.
std::optional<Value> parse_as(Type t, std::string_view text);

// The range or set a key accepts: "[1, 1048576]", "(0, 10]",
// "\"cosine\", \"linear\", \"constant\"", "true or false", "any non-empty string".
std::string accepted_text(const KeySpec& spec);

// Why `v` (already of spec.type) is not acceptable, or empty when it is.
std::optional<std::string> value_problem(const KeySpec& spec, const Value& v);

// Why this build refuses `v` although the schema names it (a value not
// built yet), or empty.
std::optional<std::string> build_problem(const KeySpec& spec, const Value& v);

// The schema's word on a key this build does not run in full, for the
// reference and docs/decks.md: "not built yet: ...", or empty.
std::string build_note(const KeySpec& spec);

}  // namespace exa::deck
