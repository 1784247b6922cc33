// Config::load: the order of the checks is part of the contract. Syntax
// first, then every deck entry (unknown section/key, type) in reading
// order, then the --set overrides, then ranges of the final values, and only
// then cross-key consistency, so a message never blames a combination that
// involves a misspelt or mistyped key.
#include <fmt/format.h>

#include <cerrno>
#include <cmath>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <sstream>

#include "core/deck/config_access.hpp"
#include "core/deck/deck_checks.hpp"
#include "core/deck/overrides.hpp"
#include "core/deck/resolve.hpp"
#include "core/deck/toml_reader.hpp"
#include "core/deck/validate.hpp"
#include "core/error.hpp"

namespace exa::deck {
namespace {

std::string read_file(const std::string& path) {
  std::error_code ec;
  if (std::filesystem::is_directory(path, ec)) {
    throw Error(fmt::format("{}: is a directory, not an input deck; give a .toml file such as input/tiny.toml", path));
  }
  std::ifstream in(path, std::ios::binary);
  if (!in) {
    throw Error(fmt::format("{}: cannot open the input deck ({}); check the path", path, std::strerror(errno)));
  }
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

// The fix for a value of the wrong type, given what the deck wrote.
std::string type_fix(const KeySpec& spec, const std::optional<Value>& got) {
  if (got && type_of(*got) == Type::String && spec.type != Type::String) {
    if (auto v = parse_as(spec.type, std::get<std::string>(*got))) {
      return fmt::format("remove the quotes: {} = {}", spec.key, to_toml_literal(*v));
    }
  }
  if (got && type_of(*got) == Type::Float && spec.type == Type::Int) {
    const double x = std::get<double>(*got);
    if (std::isfinite(x) && x == std::floor(x) && std::fabs(x) < 9e15) {
      return fmt::format("write {} = {}", spec.key, static_cast<std::int64_t>(x));
    }
  }
  if (spec.type == Type::Bool) return fmt::format("write {0} = true or {0} = false", spec.key);
  // A key that took a bool before and now names its choices
  // (memory.recompute) is told the choices.
  if (spec.type == Type::String && !spec.allowed.empty()) {
    std::string choices;
    for (const auto& a : spec.allowed) choices += (choices.empty() ? "" : ", ") + to_toml_literal(Value{a});
    return fmt::format("write {} = one of {}", spec.key, choices);
  }
  return fmt::format("write e.g. {} = {}", spec.key, to_toml_literal(spec.def));
}

// One entry of a [[data.streams]] table: path, format, weight, task.
void apply_stream_entry(Config& c, const RawEntry& e, const std::string& at) {
  auto& streams = ConfigAccess::streams(c);
  if (e.key.empty()) {
    streams.push_back(DataStream{});
    streams.back().line = e.line;
    return;
  }
  DataStream& d = streams.back();
  const std::string keys = "path, format, weight, task";
  auto text = [&](std::string& out) {
    if (!e.value || type_of(*e.value) != Type::String)
      throw Error(fmt::format("{} data.streams {} must be a string, not {}; write e.g. {} = \"{}\"", at, e.key, e.kind,
                              e.key, e.key == "format" ? "text" : e.key == "task" ? "legal" : "data/legal.txt"));
    out = std::get<std::string>(*e.value);
  };
  if (e.key == "path") {
    text(d.path);
    if (d.path.empty()) throw Error(fmt::format("{} data.streams path is empty; name the stream's file", at));
  } else if (e.key == "format") {
    text(d.format);
    if (d.format != "text" && d.format != "shard" && d.format != "hdf5")
      throw Error(fmt::format("{} data.streams format = \"{}\" is not one of \"text\", \"shard\", \"hdf5\"", at,
                              d.format));
  } else if (e.key == "task") {
    text(d.task);
    if (d.task.empty()) throw Error(fmt::format("{} data.streams task is empty; name it, or leave it out", at));
  } else if (e.key == "weight") {
    const bool number = e.value && (type_of(*e.value) == Type::Float || type_of(*e.value) == Type::Int);
    if (!number)
      throw Error(fmt::format("{} data.streams weight must be a number, not {}; write e.g. weight = 1.0", at, e.kind));
    d.weight = type_of(*e.value) == Type::Int ? double(std::get<std::int64_t>(*e.value)) : std::get<double>(*e.value);
    if (!(d.weight >= 0) || !std::isfinite(d.weight))
      throw Error(fmt::format("{} data.streams weight = {} must be a finite number >= 0", at, to_toml_literal(*e.value)));
  } else {
    throw Error(fmt::format("{} unknown key '{}' in [[data.streams]]; its keys are {}", at, e.key, keys));
  }
}

// The streams as a whole: each has a path; tasks default to the file's stem.
void finish_streams(Config& c) {
  auto& streams = ConfigAccess::streams(c);
  double total = 0;
  for (auto& d : streams) {
    if (d.path.empty())
      throw Error(fmt::format("{}:{}: this [[data.streams]] table has no path; give each stream path = \"FILE\"",
                              c.deck_path(), d.line));
    if (d.task.empty()) d.task = std::filesystem::path(d.path).stem().string();
    total += d.weight;
  }
  if (!streams.empty() && !(total > 0))
    throw Error(fmt::format("{}:{}: the [[data.streams]] weights sum to 0; give at least one stream a weight > 0",
                            c.deck_path(), streams.front().line));
}

// Checks one deck entry's section, key and type and stores its value.
// Returns the setting's index, or -1 for a section header.
int apply_entry(Config& c, const RawEntry& e) {
  const std::string at = fmt::format("{}:{}:", c.deck_path(), e.line);
  if (e.section == "data.streams") {
    apply_stream_entry(c, e, at);
    return -1;
  }
  if (e.section == "data" && e.key == "streams")
    throw Error(fmt::format("{} data.streams must be tables, not {}: write each stream as a [[data.streams]] table "
                            "with path = \"FILE\" (and format, weight, task)",
                            at, e.kind));
  if (e.section.empty()) {
    if (is_section(e.key)) {
      throw Error(fmt::format("{} '{}' is a section, not {}; write [{}] on a line of its own with its keys below it",
                              at, e.key, e.kind, e.key));
    }
    for (const auto& s : sections()) {
      if (find_key(s, e.key)) {
        throw Error(fmt::format("{} key '{}' is outside any section; move it under [{}]", at, e.key, s));
      }
    }
    throw Error(fmt::format("{} key '{}' is outside any section and no section has such a key; "
                            "keys go under [model], [moe], [parallel], ... (see input/full.toml)",
                            at, e.key));
  }
  if (!is_section(e.section)) throw Error(fmt::format("{} {}", at, unknown_section_problem(e.section)));
  if (e.key.empty()) return -1;
  const KeySpec* spec = find_key(e.section, e.key);
  if (!spec) throw Error(fmt::format("{} {}", at, unknown_key_problem(e.section, e.key)));

  std::optional<Value> v = e.value;
  if (v && spec->type == Type::Float && type_of(*v) == Type::Int) {
    v = Value{static_cast<double>(std::get<std::int64_t>(*v))};  // 1 is a fine learning rate too
  }
  if (!v || type_of(*v) != spec->type) {
    const std::string shown = e.value ? fmt::format(" ({})", to_toml_literal(*e.value)) : "";
    throw Error(fmt::format("{} {} must be {}, not {}{}; {}", at, spec->name(), type_phrase(spec->type), e.kind,
                            shown, type_fix(*spec, e.value)));
  }
  Setting& s = ConfigAccess::at(c, spec->name());
  s.value = std::move(*v);
  s.origin = Origin::File;
  s.line = e.line;
  return static_cast<int>(&s - c.settings().data());
}

int apply_override(Config& c, const Override& o) {
  Setting& s = ConfigAccess::at(c, o.spec->name());
  s.value = o.value;
  s.origin = Origin::Override;
  s.override = o.raw;
  return static_cast<int>(&s - c.settings().data());
}

}  // namespace

Config Config::load(const std::string& path, const std::vector<std::string>& overrides, int world_size) {
  return from_text(read_file(path), path, overrides, world_size);
}

Config Config::from_text(std::string text, const std::string& path, const std::vector<std::string>& overrides,
                         int world_size) {
  EXA_REQUIRE(world_size >= 1, "the world size must be at least 1 rank, not {}", world_size);
  Config c = ConfigAccess::defaults(std::move(text), path, overrides, world_size);
  std::vector<int> touched;  // settings the deck or --set gave a value, in that order
  for (const RawEntry& e : read_toml_deck(c.deck_text(), path)) {
    const int i = apply_entry(c, e);
    if (i >= 0) touched.push_back(i);
  }
  finish_streams(c);
  for (const std::string& raw : overrides) touched.push_back(apply_override(c, parse_override(raw)));

  std::vector<bool> seen(c.settings().size(), false);
  for (const int i : touched) {
    if (seen[static_cast<std::size_t>(i)]) continue;
    seen[static_cast<std::size_t>(i)] = true;
    const Setting& s = c.settings()[static_cast<std::size_t>(i)];
    if (auto problem = value_problem(*s.spec, s.value)) {
      throw Error(fmt::format("{} {}", where(c, s), *problem));
    }
    if (auto problem = build_problem(*s.spec, s.value)) {
      throw Error(fmt::format("{} {}", where(c, s), *problem));
    }
  }
  check_world(c);
  resolve_derived(c);
  check_consistency(c);
  // The checks above read keys to judge them; what counts for
  // unread_keys() is what the run reads.
  ConfigAccess::forget_reads(c);
  return c;
}

}  // namespace exa::deck
