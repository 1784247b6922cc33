// Config's accessors and the location rules for messages.
#include "core/deck/config.hpp"

#include <fmt/format.h>

#include "core/deck/config_access.hpp"
#include "core/error.hpp"

namespace exa::deck {
namespace {

// A key that is not in the schema, or read with the wrong type, is a bug in
// the caller, never a user error: the deck was fully validated on load.
template <class T>
const T& typed(const Config& c, std::string_view key, Type want) {
  const Setting& s = c.setting(key);
  if (s.spec->type != want) {
    internal_error(__FILE__, __LINE__,
                   fmt::format("deck key {} is {}, read as {}", key, type_phrase(s.spec->type), type_phrase(want)));
  }
  return std::get<T>(s.value);
}

}  // namespace

Config ConfigAccess::defaults(std::string text, std::string path, std::vector<std::string> overrides,
                              int world_size) {
  Config c;
  c.text_ = std::move(text);
  c.path_ = std::move(path);
  c.overrides_ = std::move(overrides);
  c.world_size_ = world_size;
  for (const KeySpec& k : schema()) c.settings_.push_back(Setting{&k, k.def, Origin::Default, 0, "", ""});
  c.read_ = std::make_shared<std::vector<std::atomic<bool>>>(c.settings_.size());
  return c;
}

int Config::layout_world_size() const {
  const auto sites = std::get<std::int64_t>(setting("federated.sites").value);
  return sites > 1 && world_size_ % sites == 0 ? static_cast<int>(world_size_ / sites) : world_size_;
}

void ConfigAccess::forget_reads(Config& c) {
  for (auto& r : *c.read_) r.store(false, std::memory_order_relaxed);
}

Setting& ConfigAccess::at(Config& c, std::string_view key) {
  return const_cast<Setting&>(c.setting(key));
}

std::string where(const Config& c, const Setting& s) {
  switch (s.origin) {
    case Origin::File: return fmt::format("{}:{}:", c.deck_path(), s.line);
    case Origin::Override: return fmt::format("--set {}:", s.override);
    case Origin::Default: break;
  }
  return c.deck_path() + ":";
}

const Setting& Config::setting(std::string_view key) const {
  const auto dot = key.find('.');
  if (dot != std::string_view::npos) {
    const auto section = key.substr(0, dot), name = key.substr(dot + 1);
    for (const Setting& s : settings_) {
      if (s.spec->section == section && s.spec->key == name) return s;
    }
  }
  internal_error(__FILE__, __LINE__, fmt::format("no deck key {} in the schema", key));
}

void Config::note_read(const Setting& s) const {
  (*read_)[static_cast<std::size_t>(&s - settings_.data())].store(true, std::memory_order_relaxed);
}

std::int64_t Config::get_int(std::string_view key) const {
  note_read(setting(key));
  return typed<std::int64_t>(*this, key, Type::Int);
}
double Config::get_float(std::string_view key) const {
  note_read(setting(key));
  return typed<double>(*this, key, Type::Float);
}
bool Config::get_bool(std::string_view key) const {
  note_read(setting(key));
  return typed<bool>(*this, key, Type::Bool);
}
const std::string& Config::get_string(std::string_view key) const {
  note_read(setting(key));
  return typed<std::string>(*this, key, Type::String);
}

std::vector<std::string> Config::unread_keys() const {
  std::vector<std::string> out;
  for (std::size_t i = 0; i < settings_.size(); ++i) {
    if (!(*read_)[i].load(std::memory_order_relaxed) && !settings_[i].spec->only_default())
      out.push_back(settings_[i].spec->name());
  }
  return out;
}

std::string Config::locate(std::initializer_list<std::string_view> keys) const {
  // The value changed last (--set, then the deck) is the likeliest culprit.
  for (const Origin o : {Origin::Override, Origin::File}) {
    for (const auto key : keys) {
      const Setting& s = setting(key);
      if (s.origin == o) return where(*this, s);
    }
  }
  return path_ + ":";
}

}  // namespace exa::deck
