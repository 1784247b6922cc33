#pragma once
// <run>/metrics.jsonl: one JSON object per line, written by rank 0 only.
// The first line of every run (and of every restart) records the resolved
// configuration, so a metrics file explains itself without the deck.
#include <cstdio>
#include <nlohmann/json.hpp>
#include <string>

namespace exa::io {

class MetricsWriter {
 public:
  // Opens `path` for appending on rank 0 (other ranks hold a no-op writer).
  MetricsWriter(const std::string& path, bool is_root);
  ~MetricsWriter();
  MetricsWriter(const MetricsWriter&) = delete;
  MetricsWriter& operator=(const MetricsWriter&) = delete;

  void write(const nlohmann::json& record);
  const std::string& path() const { return path_; }

 private:
  std::string path_;
  std::FILE* file_ = nullptr;
};

}  // namespace exa::io
