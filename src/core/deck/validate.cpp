#include "core/deck/validate.hpp"

#include <fmt/format.h>

#include <charconv>

#include "core/deck/did_you_mean.hpp"

namespace exa::deck {
namespace {

std::string join(const std::vector<std::string>& items, const char* open, const char* close) {
  std::string out;
  for (const auto& s : items) out += (out.empty() ? "" : ", ") + std::string(open) + s + close;
  return out;
}

std::vector<std::string> keys_of(std::string_view section) {
  std::vector<std::string> keys;
  for (const auto& k : schema()) {
    if (k.section == section) keys.push_back(k.key);
  }
  return keys;
}

std::string bound(const KeySpec& spec, double b) {
  // Plain numbers read better in a range than TOML literals: (0, 10], not (0.0, 10.0].
  return spec.type == Type::Int ? fmt::format("{}", static_cast<std::int64_t>(b)) : fmt::format("{}", b);
}

}  // namespace

std::string unknown_section_problem(std::string_view section) {
  const std::string guess = did_you_mean(section, sections());
  if (!guess.empty()) return fmt::format("unknown section [{}]; did you mean [{}]?", section, guess);
  return fmt::format("unknown section [{}]; the sections are {}", section, join(sections(), "[", "]"));
}

std::string unknown_key_problem(std::string_view section, std::string_view key) {
  const std::string guess = did_you_mean(key, keys_of(section));
  if (!guess.empty()) return fmt::format("unknown key '{}' in [{}]; did you mean '{}'?", key, section, guess);
  for (const auto& s : sections()) {
    if (find_key(s, key)) return fmt::format("unknown key '{}' in [{}]; it belongs in [{}]: move it there", key, section, s);
  }
  return fmt::format("unknown key '{}' in [{}]; the keys of [{}] are {}", key, section, section,
                     join(keys_of(section), "", ""));
}

std::optional<Value> parse_as(Type t, std::string_view text) {
  const char* first = text.data();
  const char* last = text.data() + text.size();
  if (!text.empty() && text[0] == '+') ++first;  // from_chars rejects a leading '+'
  switch (t) {
    case Type::Int: {
      std::int64_t v = 0;
      const auto r = std::from_chars(first, last, v);
      if (text.empty() || r.ec != std::errc() || r.ptr != last) return std::nullopt;
      return Value{v};
    }
    case Type::Float: {
      double v = 0;
      const auto r = std::from_chars(first, last, v);
      if (text.empty() || r.ec != std::errc() || r.ptr != last) return std::nullopt;
      return Value{v};
    }
    case Type::Bool:
      if (text == "true") return Value{true};
      if (text == "false") return Value{false};
      return std::nullopt;
    case Type::String: return Value{std::string(text)};
  }
  return std::nullopt;
}

std::string accepted_text(const KeySpec& spec) {
  switch (spec.type) {
    case Type::Int:
    case Type::Float:
      return fmt::format("{}{}, {}{}", spec.lo_open ? "(" : "[", bound(spec, spec.lo), bound(spec, spec.hi),
                         spec.hi_open ? ")" : "]");
    case Type::Bool: return "true or false";
    case Type::String: return spec.allowed.empty() ? "any non-empty string" : join(spec.allowed, "\"", "\"");
  }
  return "?";
}

std::optional<std::string> value_problem(const KeySpec& spec, const Value& v) {
  const std::string name = spec.name();
  if (spec.type == Type::Int || spec.type == Type::Float) {
    const double x = spec.type == Type::Int ? static_cast<double>(std::get<std::int64_t>(v)) : std::get<double>(v);
    // Written so that NaN fails every comparison and is rejected.
    const bool above = spec.lo_open ? x > spec.lo : x >= spec.lo;
    const bool below = spec.hi_open ? x < spec.hi : x <= spec.hi;
    if (above && below) return std::nullopt;
    return fmt::format("{} = {} is out of range; it must be in {} ({})", name, to_toml_literal(v),
                       accepted_text(spec), spec.doc);
  }
  if (spec.type == Type::String) {
    const auto& s = std::get<std::string>(v);
    if (spec.allowed.empty()) {
      if (!s.empty()) return std::nullopt;
      return fmt::format("{} is empty; give a value ({})", name, spec.doc);
    }
    for (const auto& a : spec.allowed) {
      if (a == s) return std::nullopt;
    }
    const std::string guess = did_you_mean(s, spec.allowed);
    return fmt::format("{} = {} is not one of {}; {}", name, quote(s), accepted_text(spec),
                       guess.empty() ? "use one of these" : fmt::format("did you mean \"{}\"?", guess));
  }
  return std::nullopt;
}

std::optional<std::string> build_problem(const KeySpec& spec, const Value& v) {
  if (!spec.refuses(v)) return std::nullopt;
  if (spec.needs_cuda(v))
    return fmt::format("{} = {} needs a CUDA build ({}), and this build has none; set {} = {}", spec.name(),
                       to_toml_literal(v), spec.cuda_only_why, spec.name(), to_toml_literal(spec.def));
  return fmt::format("{} = {} is not available in this build yet; set {} = {}", spec.name(), to_toml_literal(v),
                     spec.name(), to_toml_literal(spec.def));
}

std::string build_note(const KeySpec& spec) {
  std::string note;
  if (!spec.not_built.empty()) note = "not built yet: " + join(spec.not_built, "\"", "\"");
  if (!spec.cuda_only.empty())
    note += (note.empty() ? "" : "; ") + std::string("CUDA builds only: ") + join(spec.cuda_only, "\"", "\"");
  return note;
}

}  // namespace exa::deck
