#include "io/metrics_writer.hpp"

#include "core/error.hpp"

namespace exa::io {

MetricsWriter::MetricsWriter(const std::string& path, bool is_root) : path_(path) {
  if (!is_root) return;
  file_ = std::fopen(path.c_str(), "a");
  EXA_REQUIRE(file_ != nullptr, "cannot open {} for appending metrics: check that output.run_dir is writable",
              path);
}

MetricsWriter::~MetricsWriter() {
  if (file_) std::fclose(file_);
}

void MetricsWriter::write(const nlohmann::json& record) {
  if (!file_) return;
  const std::string line = record.dump() + "\n";
  std::fwrite(line.data(), 1, line.size(), file_);
  std::fflush(file_);  // a killed run keeps every line it logged
}

}  // namespace exa::io
