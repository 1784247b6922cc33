#pragma once
// The four value types a deck key can have, and how values are written back
// as TOML literals (for the resolved-configuration dump and for messages).
#include <cstdint>
#include <string>
#include <variant>

namespace exa::deck {

enum class Type { Int, Float, Bool, String };

// Held in this order; Value::index() == static_cast<int>(Type).
using Value = std::variant<std::int64_t, double, bool, std::string>;

Type type_of(const Value& v);

// "an integer", "a float", "a boolean", "a string": for messages.
const char* type_phrase(Type t);

// TOML literal that reads back as the same value and type: 128, 0.0003,
// 1.0 (never "1", which TOML reads as an integer), true, "text".
std::string to_toml_literal(const Value& v);

// TOML basic string with the escapes TOML requires.
std::string quote(const std::string& s);

}  // namespace exa::deck
