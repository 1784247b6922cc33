#include "io/checkpoint/checkpoint_report.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <filesystem>

#include "kernels/checksum.hpp"

namespace exa::io {

std::string format_checkpoint_info(const CheckpointInfo& info, bool with_deck) {
  const auto& m = info.meta;
  std::string s;
  auto line = [&](const std::string& key, const std::string& value) { s += fmt::format("{:<18} {}\n", key, value); };
  line("file", (std::filesystem::path(m.directory) / kCheckpointFile).string());
  line("format_version", std::to_string(m.format_version));
  line("created_by", m.created_by.empty() ? "(not recorded)" : m.created_by);
  line("step", std::to_string(m.step));
  line("tokens_seen", std::to_string(m.tokens_seen));
  line("data_cursor", std::to_string(m.data_cursor));
  line("rng_state", fmt::format("[{}]", fmt::join(m.rng_state, ", ")));
  for (const auto& [k, v] : m.lr_schedule) line("lr_schedule." + k, fmt::format("{:g}", v));
  line("layout", m.layout.to_json());
  line("optimizer state", m.has_optimizer ? "yes (/optim/exp_avg, /optim/exp_avg_sq)" : "no");
  line("merkle_root", kernels::checksum_hex(m.merkle_root));
  if (m.chunk_elements > 0) {
    line("chunk_elements", std::to_string(m.chunk_elements));
    line("chunk_merkle_root", kernels::checksum_hex(m.chunk_merkle_root));
  } else {
    line("chunk checksums", "none (written before chunk checksums: verified per dataset)");
  }
  // Expert growth's events (/state/growth_history: step, from, to).
  if (const auto it = m.state.find("growth_history"); it != m.state.end()) {
    std::string events;
    for (std::size_t r = 0; r + 2 < it->second.values.size(); r += 3)
      events += fmt::format("{}after step {}: {} -> {} experts", events.empty() ? "" : "; ",
                            std::int64_t(it->second.values[r]), std::int64_t(it->second.values[r + 1]),
                            std::int64_t(it->second.values[r + 2]));
    line("expert growth", events);
  }
  std::size_t w = 7;
  for (const auto& d : info.datasets) w = std::max(w, d.path.size());
  s += fmt::format("\n{:<{}}  {:<16} {:>12} {:>10}  {:<16} {:>6}\n", "dataset", w, "shape", "elements", "MiB",
                   "checksum", "chunks");
  std::int64_t total = 0;
  for (const auto& d : info.datasets) {
    std::int64_t n = 1;
    for (auto x : d.shape) n *= x;
    total += n;
    s += fmt::format("{:<{}}  {:<16} {:>12} {:>10.3f}  {:<16} {:>6}\n", d.path, w,
                     fmt::format("[{}]", fmt::join(d.shape, ", ")), n, double(n) * 4 / (1 << 20),
                     kernels::checksum_hex(d.checksum), d.chunk_checksums.size());
  }
  s += fmt::format("{} datasets, {} elements, {:.3f} MiB of float32\n", info.datasets.size(), total,
                   double(total) * 4 / (1 << 20));
  if (with_deck) s += "\ndeck:\n" + m.deck + (m.deck.empty() || m.deck.back() == '\n' ? "" : "\n");
  return s;
}

std::string format_verify_result(const VerifyResult& r) {
  if (r.ok()) {
    return fmt::format("OK: {}: metadata, Merkle roots and {} datasets ({} chunks) verified\n", r.file,
                       r.info.datasets.size(), r.chunks_checked);
  }
  std::string s;
  for (const auto& m : r.mismatches) {
    s += fmt::format("CORRUPT: {}: dataset {} chunk {} (elements [{}, {})) reads back with checksum {} but was "
                     "written with {}\n",
                     r.file, m.path, m.chunk, m.elements.begin, m.elements.end, kernels::checksum_hex(m.computed),
                     kernels::checksum_hex(m.stored));
  }
  s += fmt::format("{} of {} chunks do not match their checksums\n", r.mismatches.size(), r.chunks_checked);
  return s;
}

}  // namespace exa::io
