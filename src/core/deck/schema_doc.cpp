// The schema as a reference table for people (`examoe --keys`), generated
// from the one table so that it cannot drift from what the loader accepts.
#include <fmt/format.h>

#include <algorithm>

#include "core/deck/schema.hpp"
#include "core/deck/validate.hpp"

namespace exa::deck {

std::string schema_reference() {
  static const char* type_names[] = {"int", "float", "bool", "string"};
  std::size_t key_w = 0, range_w = 0, def_w = 0;
  for (const auto& k : schema()) {
    key_w = std::max(key_w, k.key.size());
    range_w = std::max(range_w, accepted_text(k).size());
    def_w = std::max(def_w, to_toml_literal(k.def).size());
  }
  std::string out = "Deck keys: section, key, type, accepted values, default, meaning.\n"
                    "Set them in the deck or with --set section.key=value.\n";
  std::string section;
  for (const auto& k : schema()) {
    if (k.section != section) {
      section = k.section;
      out += fmt::format("\n[{}]\n", section);
    }
    out += fmt::format("  {:<{}}  {:<6}  {:<{}}  {:<{}}  {}\n", k.key, key_w, type_names[static_cast<int>(k.type)],
                       accepted_text(k), range_w, to_toml_literal(k.def), def_w, k.doc);
  }
  return out;
}

}  // namespace exa::deck
