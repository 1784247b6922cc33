// toml++ 3.3 (Debian 12) does not compile under nvcc (its headers trip over
// CUDA's __noinline__ macro and over lambdas in if-constexpr), so this file
// is built host-only in CUDA builds (see src/core/CMakeLists.txt) and no
// deck header includes toml++.
#include "core/deck/toml_reader.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <toml++/toml.h>

#include "core/error.hpp"

namespace exa::deck {
namespace {

int line_of(const toml::key& k, const toml::node& v) {
  if (k.source().begin.line > 0) return static_cast<int>(k.source().begin.line);
  return static_cast<int>(v.source().begin.line);
}
int column_of(const toml::key& k, const toml::node& v) {
  if (k.source().begin.line > 0) return static_cast<int>(k.source().begin.column);
  return static_cast<int>(v.source().begin.column);
}

RawEntry entry(std::string section, const toml::key& k, const toml::node& v) {
  RawEntry e;
  e.section = std::move(section);
  e.key = std::string(k.str());
  e.line = line_of(k, v);
  e.column = column_of(k, v);
  switch (v.type()) {
    case toml::node_type::integer:
      e.value = Value{static_cast<std::int64_t>(v.as_integer()->get())};
      e.kind = "an integer";
      break;
    case toml::node_type::floating_point:
      e.value = Value{v.as_floating_point()->get()};
      e.kind = "a float";
      break;
    case toml::node_type::boolean:
      e.value = Value{v.as_boolean()->get()};
      e.kind = "a boolean";
      break;
    case toml::node_type::string:
      e.value = Value{std::string(v.as_string()->get())};
      e.kind = "a string";
      break;
    case toml::node_type::table: e.kind = "a table"; break;
    case toml::node_type::array: e.kind = "an array"; break;
    case toml::node_type::date: e.kind = "a date"; break;
    case toml::node_type::time: e.kind = "a time"; break;
    case toml::node_type::date_time: e.kind = "a date-time"; break;
    case toml::node_type::none: e.kind = "nothing"; break;
  }
  return e;
}

// toml++ says "Error while parsing key-value pair: expected '=', saw '5'";
// after our "TOML syntax error" prefix the leading words are redundant.
std::string describe(const toml::parse_error& err) {
  std::string d(err.description());
  const std::string lead = "Error while parsing ";
  if (d.compare(0, lead.size(), lead) == 0) return "in " + d.substr(lead.size());
  return ": " + d;
}

}  // namespace

std::vector<RawEntry> read_toml_deck(std::string_view text, const std::string& path) {
  toml::table root;
  try {
    root = toml::parse(text, std::string_view(path));
  } catch (const toml::parse_error& err) {
    const std::string d = describe(err);
    throw Error(fmt::format("{}:{}:{}: TOML syntax error{}{}", path, err.source().begin.line,
                            err.source().begin.column, d[0] == ':' ? "" : " ", d));
  }
  std::vector<RawEntry> out;
  for (auto&& [k, v] : root) {
    if (!v.is_table()) {
      out.push_back(entry("", k, v));
      continue;
    }
    RawEntry header = entry(std::string(k.str()), k, v);
    header.key.clear();
    out.push_back(header);
    for (auto&& [k2, v2] : *v.as_table()) {
      const toml::array* streams = k.str() == "data" && k2.str() == "streams" ? v2.as_array() : nullptr;
      if (streams == nullptr || !streams->is_array_of_tables() || streams->empty()) {
        out.push_back(entry(std::string(k.str()), k2, v2));
        continue;
      }
      for (std::size_t i = 0; i < streams->size(); ++i) {
        const toml::table& t = *streams->get(i)->as_table();
        RawEntry h;
        h.section = "data.streams";
        h.index = int(i);
        h.line = static_cast<int>(t.source().begin.line);
        h.column = static_cast<int>(t.source().begin.column);
        h.kind = "a table";
        out.push_back(h);
        for (auto&& [k3, v3] : t) {
          RawEntry e = entry("data.streams", k3, v3);
          e.index = int(i);
          out.push_back(std::move(e));
        }
      }
    }
  }
  // toml++ tables iterate in key order; report problems in reading order.
  std::stable_sort(out.begin(), out.end(), [](const RawEntry& a, const RawEntry& b) {
    return a.line != b.line ? a.line < b.line : a.column < b.column;
  });
  return out;
}

}  // namespace exa::deck
