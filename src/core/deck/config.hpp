#pragma once
// exa::deck::Config: the validated, fully resolved input deck.
//
//   auto cfg = exa::deck::Config::load("input/tiny.toml", {"train.steps=100"}, world_size);
//   const auto d = cfg.get_int("model.d_model");
//
// Loading reads the TOML deck, applies `--set section.key=value` overrides,
// checks every value against the schema (schema.cpp), derives the values the
// deck leaves to ExaMoE (dp = 0, n_kv_heads = 0, ...) and checks that the
// combination is consistent for `world_size` ranks. Any problem throws
// exa::Error whose message starts with "<file>:<line>:" (or
// "--set section.key=value:") and names the fix. A Config that exists is
// valid: code downstream never re-checks the deck.
#include <algorithm>
#include <atomic>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <string_view>
#include <vector>

#include "core/deck/schema.hpp"
#include "core/deck/value.hpp"

namespace exa::deck {

// Where a value came from; the dump prints it next to each value.
enum class Origin { Default, File, Override };

struct Setting {
  const KeySpec* spec = nullptr;
  Value value;
  Origin origin = Origin::Default;
  int line = 0;          // Origin::File: line in the deck
  std::string override;  // Origin::Override: the "section.key=value" text
  std::string derived;   // non-empty when ExaMoE computed the value: why
};

// One [[data.streams]] table (docs/data.md, "Data streams"): a corpus of
// its own in a weighted mixture. `task` names what its loss is reported as
// (and groups streams for train.grad_projection); by default the file's
// stem.
struct DataStream {
  std::string path, format = "text", task;
  double weight = 1.0;
  int line = 0;  // where its [[data.streams]] header is
};

// The distinct tasks of `streams`, in first-appearance order.
inline std::vector<std::string> stream_tasks(const std::vector<DataStream>& streams) {
  std::vector<std::string> tasks;
  for (const auto& d : streams)
    if (std::find(tasks.begin(), tasks.end(), d.task) == tasks.end()) tasks.push_back(d.task);
  return tasks;
}

class Config {
 public:
  // Reads the deck at `path`. `world_size` is the number of ranks the run
  // will have (the MPI world, or `examoe --check --ranks N`).
  static Config load(const std::string& path, const std::vector<std::string>& overrides, int world_size);

  // Same, from deck text already in memory (a checkpoint's stored deck, a
  // test); `path` is only used in messages.
  static Config from_text(std::string text, const std::string& path, const std::vector<std::string>& overrides,
                          int world_size);

  // Typed access by "section.key". Asking for a key that does not exist or
  // with the wrong type is a programming error (exa::Error "internal error").
  std::int64_t get_int(std::string_view key) const;
  double get_float(std::string_view key) const;
  bool get_bool(std::string_view key) const;
  const std::string& get_string(std::string_view key) const;
  const Setting& setting(std::string_view key) const;
  const std::vector<Setting>& settings() const { return settings_; }  // schema order
  // The deck's [[data.streams]] tables, in order; empty: data.path alone.
  const std::vector<DataStream>& streams() const { return streams_; }

  // Keys no code has asked for with get_*() since the load, on this Config
  // or on any copy of it, less the keys that only take their default
  // (every other value not built yet). After a run has started and stepped, a key listed here is
  // one a deck could set and nothing would read: the guard test fails on it.
  std::vector<std::string> unread_keys() const;

  const std::string& deck_text() const { return text_; }  // the deck as read, verbatim
  const std::string& deck_path() const { return path_; }
  const std::vector<std::string>& overrides() const { return overrides_; }
  int world_size() const { return world_size_; }
  // The ranks the [parallel] layout spans: the world, or one federated
  // site's share of it (world / federated.sites).
  int layout_world_size() const;

  // Resolved configuration as TOML, each value commented with its origin
  // (default / file line / --set / derived). It loads back to the same values,
  // but for the layout parallel.auto chose: those lines are comments, since
  // such a deck may not set them, and the loaded dump plans again.
  std::string to_toml() const;
  // Resolved values as a JSON object {"model": {"d_model": 128, ...}, ...}.
  std::string to_json(int indent = -1) const;

  // Prefix for a message about a problem involving `keys`: the location of
  // the first of them set by --set, else of the first set in the deck, else
  // the deck itself. "input/tiny.toml:12:", "--set model.n_heads=3:".
  std::string locate(std::initializer_list<std::string_view> keys) const;

 private:
  friend struct ConfigAccess;  // the loader's pieces (config_access.hpp)
  Config() = default;
  std::string path_, text_;
  std::vector<std::string> overrides_;
  int world_size_ = 1;
  std::vector<Setting> settings_;
  std::vector<DataStream> streams_;
  // One flag per setting, shared by every copy: the Trainer keeps a copy of
  // the Config it was given, and its reads must count for the original.
  std::shared_ptr<std::vector<std::atomic<bool>>> read_;
  void note_read(const Setting& s) const;
};

}  // namespace exa::deck
