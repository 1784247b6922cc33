#include "core/deck/value.hpp"

#include <fmt/format.h>

namespace exa::deck {

Type type_of(const Value& v) { return static_cast<Type>(v.index()); }

const char* type_phrase(Type t) {
  switch (t) {
    case Type::Int: return "an integer";
    case Type::Float: return "a float";
    case Type::Bool: return "a boolean";
    case Type::String: return "a string";
  }
  return "?";
}

std::string quote(const std::string& s) {
  std::string out = "\"";
  for (const char c : s) {
    switch (c) {
      case '"': out += "\\\""; break;
      case '\\': out += "\\\\"; break;
      case '\n': out += "\\n"; break;
      case '\t': out += "\\t"; break;
      case '\r': out += "\\r"; break;
      default:
        if (static_cast<unsigned char>(c) < 0x20 || c == 0x7f) {
          out += fmt::format("\\u{:04X}", static_cast<unsigned>(static_cast<unsigned char>(c)));
        } else {
          out += c;
        }
    }
  }
  return out + "\"";
}

std::string to_toml_literal(const Value& v) {
  switch (type_of(v)) {
    case Type::Int: return fmt::format("{}", std::get<std::int64_t>(v));
    case Type::Float: {
      // fmt's shortest round-trip form; add ".0" where it looks like an int.
      std::string s = fmt::format("{}", std::get<double>(v));
      if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // 'n': inf, nan
      return s;
    }
    case Type::Bool: return std::get<bool>(v) ? "true" : "false";
    case Type::String: return quote(std::get<std::string>(v));
  }
  return "?";
}

}  // namespace exa::deck
