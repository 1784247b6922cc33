// The resolved configuration as text: TOML for people (printed at start,
// stored next to checkpoints) and JSON for machines (metrics files).
#include <fmt/format.h>

#include <algorithm>
#include <nlohmann/json.hpp>

#include "core/deck/config.hpp"
#include "core/deck/deck_checks.hpp"

namespace exa::deck {
namespace {

std::string origin_text(const Setting& s) {
  std::string o;
  switch (s.origin) {
    case Origin::Default: o = "default"; break;
    case Origin::File: o = fmt::format("deck line {}", s.line); break;
    case Origin::Override: o = "--set " + s.override; break;
  }
  return s.derived.empty() ? o : o + "; " + s.derived;
}

}  // namespace

std::string Config::to_toml() const {
  // Align the origin comments, but not behind an overly long string value.
  std::size_t width = 0;
  for (const Setting& s : settings_) {
    width = std::max(width, s.spec->key.size() + 3 + to_toml_literal(s.value).size());
  }
  width = std::min<std::size_t>(width, 40);
  std::string out = fmt::format(
      "# ExaMoE resolved configuration\n# deck: {}\n# ranks: {}\n"
      "# after each value: where it came from (default, deck line, --set; derived values say how)\n",
      path_, world_size_);
  const bool planner = get_bool("parallel.auto");
  const auto& layout = auto_layout_keys();
  auto planned = [&](const Setting& s) {
    return planner && !(s.value == s.spec->def) &&
           std::find(layout.begin(), layout.end(), s.spec->name()) != layout.end();
  };
  // The [[data.streams]] tables follow [data]'s keys.
  auto streams = [&] {
    for (const DataStream& d : streams_)
      out += fmt::format("\n[[data.streams]]  # deck line {}\npath = {}\nformat = {}\nweight = {}\ntask = {}\n", d.line,
                         to_toml_literal(Value{d.path}), to_toml_literal(Value{d.format}),
                         to_toml_literal(Value{d.weight}), to_toml_literal(Value{d.task}));
  };
  std::string section;
  for (const Setting& s : settings_) {
    if (s.spec->section != section) {
      if (section == "data") streams();
      section = s.spec->section;
      out += fmt::format("\n[{}]\n", section);
    }
    const std::string assign = s.spec->key + " = " + to_toml_literal(s.value);
    if (!streams_.empty() && (s.spec->name() == "data.path" || s.spec->name() == "data.format")) {
      out += fmt::format("# {:<{}}  # the [[data.streams]] below name the data\n", assign, width);
      continue;
    }
    if (planned(s)) {
      // A deck with parallel.auto = true may not set the layout, so the
      // planner's choice (and what it derived) stays a comment: the dump
      // plans again when loaded.
      out += fmt::format("# {:<{}}  # chosen by parallel.auto ({}); to keep it, set auto = false and uncomment\n",
                         assign, width, origin_text(s));
      continue;
    }
    out += fmt::format("{:<{}}  # {}\n", assign, width, origin_text(s));
  }
  return out;
}

std::string Config::to_json(int indent) const {
  nlohmann::ordered_json j = nlohmann::ordered_json::object();
  for (const Setting& s : settings_) {
    // With [[data.streams]] the streams name the data: the unused path and
    // format are left out (a checkpoint's stored configuration reloads as
    // --set overrides, which the deck would refuse beside the streams).
    if (!streams_.empty() && (s.spec->name() == "data.path" || s.spec->name() == "data.format")) continue;
    auto& slot = j[s.spec->section][s.spec->key];
    std::visit([&](const auto& v) { slot = v; }, s.value);
  }
  for (const DataStream& d : streams_)
    j["data"]["streams"].push_back(
        nlohmann::ordered_json{{"path", d.path}, {"format", d.format}, {"weight", d.weight}, {"task", d.task}});
  return j.dump(indent);
}

}  // namespace exa::deck
