// Fuzz target: the input deck (core/deck/), from TOML text to a resolved,
// checked Config, and the `--set` overrides.
//
// Input: deck text, optionally followed by a NUL byte and lines: the first
// the world size (ranks), each further one an override ("train.steps=100").
// Beyond "no crash, only exa::Error", a Config that loads must dump
// (to_toml) to text that loads back, for the same ranks and without the
// overrides, to the same values (but for the layout parallel.auto chose,
// which the dump keeps as comments): config.hpp promises it.
#include <cstddef>
#include <cstdint>
#include <algorithm>
#include <cstdlib>
#include <string>
#include <vector>

#include "core/deck/config.hpp"
#include "core/deck/deck_checks.hpp"
#include "core/deck/overrides.hpp"
#include "fuzz_util.hpp"

namespace {

struct DeckInput {
  std::string text;
  std::vector<std::string> overrides;
  int world_size = 1;
};

DeckInput split(const std::uint8_t* data, std::size_t size) {
  DeckInput in;
  const std::string all(reinterpret_cast<const char*>(data), size);
  const auto nul = all.find('\0');
  in.text = all.substr(0, nul);
  if (nul == std::string::npos) return in;
  std::vector<std::string> lines;
  std::size_t pos = nul + 1;
  while (pos <= all.size()) {
    const auto nl = all.find('\n', pos);
    lines.push_back(all.substr(pos, nl == std::string::npos ? std::string::npos : nl - pos));
    if (nl == std::string::npos) break;
    pos = nl + 1;
  }
  if (!lines.empty()) {
    // Bounded: the checks loop over divisors of the world, not over ranks,
    // but a billion-rank world says nothing a thousand-rank one does not.
    const long w = std::strtol(lines[0].c_str(), nullptr, 10);
    in.world_size = static_cast<int>(w < -8 ? -8 : (w > 4096 ? 4096 : w));
    in.overrides.assign(lines.begin() + 1, lines.end());
  }
  return in;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) { return 0; }

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  using exa::deck::Config;
  const DeckInput in = split(data, size);
  for (const auto& o : in.overrides) {
    exa::fuzz::run_guarded("parse_override", [&] { (void)exa::deck::parse_override(o); });
  }
  std::string dump;
  std::vector<exa::deck::Setting> settings;
  const bool loaded = exa::fuzz::run_guarded("Config::from_text", [&] {
    const Config c = Config::from_text(in.text, "fuzz.toml", in.overrides, in.world_size);
    dump = c.to_toml();
    (void)c.to_json(2);
    settings = c.settings();
  });
  if (!loaded) return 0;
  try {
    const Config back = Config::from_text(dump, "dump.toml", {}, in.world_size);
    if (back.settings().size() != settings.size()) exa::fuzz::finding("the dump loads back with other keys");
    const auto& layout = exa::deck::auto_layout_keys();
    for (std::size_t i = 0; i < settings.size(); ++i) {
      // parallel.auto's layout is a comment in the dump (config.hpp).
      const bool planned = back.get_bool("parallel.auto") &&
                           std::find(layout.begin(), layout.end(), settings[i].spec->name()) != layout.end();
      if (!planned && back.settings()[i].value != settings[i].value) {
        exa::fuzz::finding("the dump loads " + settings[i].spec->name() + " back as another value:\n" + dump);
      }
    }
  } catch (const std::exception& e) {
    exa::fuzz::finding(std::string("the dump of a valid deck does not load back: ") + e.what() + "\n" + dump);
  }
  return 0;
}
