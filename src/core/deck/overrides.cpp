#include "core/deck/overrides.hpp"

#include <fmt/format.h>

#include "core/deck/validate.hpp"
#include "core/error.hpp"

namespace exa::deck {
namespace {

std::string trim(const std::string& s) {
  const auto b = s.find_first_not_of(" \t");
  if (b == std::string::npos) return "";
  const auto e = s.find_last_not_of(" \t");
  return s.substr(b, e - b + 1);
}

// Example of the right spelling of an override of `spec`, for messages.
std::string example(const KeySpec& spec) {
  if (spec.type == Type::Bool) return fmt::format("--set {0}=true or --set {0}=false", spec.name());
  const std::string v = spec.type == Type::String ? std::get<std::string>(spec.def) : to_toml_literal(spec.def);
  return fmt::format("--set {}={}", spec.name(), v);
}

}  // namespace

Override parse_override(const std::string& raw) {
  const std::string at = "--set " + raw + ":";
  const auto eq = raw.find('=');
  const std::string lhs = trim(raw.substr(0, eq));
  if (eq == std::string::npos || lhs.empty()) {
    throw Error(fmt::format("{} malformed override; write --set section.key=value, e.g. --set train.steps=100", at));
  }
  std::string text = trim(raw.substr(eq + 1));
  const auto dot = lhs.find('.');
  if (dot == std::string::npos) {
    for (const auto& s : sections()) {
      if (find_key(s, lhs)) {
        throw Error(fmt::format("{} malformed override: the key needs its section; write --set {}.{}={}", at, s,
                                lhs, text));
      }
    }
    throw Error(fmt::format("{} malformed override; write --set section.key=value, e.g. --set train.steps=100", at));
  }
  const std::string section = lhs.substr(0, dot), key = lhs.substr(dot + 1);
  if (!is_section(section)) throw Error(fmt::format("{} {}", at, unknown_section_problem(section)));
  const KeySpec* spec = find_key(section, key);
  if (!spec) throw Error(fmt::format("{} {}", at, unknown_key_problem(section, key)));

  if (text.size() >= 2 && text.front() == '"' && text.back() == '"') text = text.substr(1, text.size() - 2);
  auto value = parse_as(spec->type, text);
  if (!value) {
    throw Error(fmt::format("{} {} must be {}, not \"{}\"; write e.g. {}", at, spec->name(), type_phrase(spec->type),
                            text, example(*spec)));
  }
  return Override{raw, spec, std::move(*value)};
}

}  // namespace exa::deck
