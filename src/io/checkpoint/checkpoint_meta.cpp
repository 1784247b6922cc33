// A checkpoint's metadata: the layout and meta JSON, the attributes on "/"
// with their checksum, the datasets' stored checksums and the Merkle roots
// over them, and opening a file with a message that says what to do.
#include <fmt/format.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>

#include "core/build_info.hpp"
#include "core/error.hpp"
#include "io/checkpoint/checkpoint.hpp"
#include "io/checkpoint/checkpoint_fs.hpp"
#include "io/checkpoint/checkpoint_internal.hpp"
#include "io/checkpoint/chunk_sums.hpp"
#include "io/checkpoint/h5.hpp"
#include "io/checkpoint/meta_json.hpp"
#include "kernels/checksum.hpp"

namespace exa::io {

namespace fs = std::filesystem;

std::string CheckpointLayout::to_json() const {
  nlohmann::ordered_json j;
  j["world_size"] = world_size;
  j["pp"] = pp;
  j["dp"] = dp;
  j["cp"] = cp;
  j["tp"] = tp;
  j["ep"] = ep;
  j["zero"] = zero;
  return j.dump();
}

CheckpointLayout CheckpointLayout::from_json(const std::string& text) {
  CheckpointLayout l;
  try {
    const auto j = nlohmann::json::parse(text);
    auto get = [&](const char* k, std::int64_t& v) {
      if (j.contains(k)) v = j.at(k).get<std::int64_t>();
    };
    get("world_size", l.world_size);
    get("pp", l.pp);
    get("dp", l.dp);
    get("cp", l.cp);
    get("tp", l.tp);
    get("ep", l.ep);
    get("zero", l.zero);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("the checkpoint's layout attribute is not valid JSON ({}): {}", e.what(), text));
  }
  return l;
}

bool CheckpointLayout::operator==(const CheckpointLayout& o) const {
  return world_size == o.world_size && pp == o.pp && dp == o.dp && cp == o.cp && tp == o.tp && ep == o.ep &&
         zero == o.zero;
}

namespace {

// Fuzz builds (tests/fuzz/) take stored checksums of metadata on trust, so
// that a mutated file gets past them to the reading behind; every check of
// a file's structure still holds there.
#ifdef FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION
constexpr bool kCheckMetaSums = false;
#else
constexpr bool kCheckMetaSums = true;
#endif

constexpr const char* kLrPrefix = "lr_schedule.";

// Guards the attributes on "/" as the Merkle root guards the datasets:
// checksum_leaf(B, 0) (XXH64, kernels/checksum.hpp) of the bytes B =
//   "examoe-meta-1" | u64 step | u64 tokens_seen | u64 data_cursor
//   | u64 n | n x u64 rng_state | u64 m | m x (str key | u64 bits of the f64)
//   | str deck | str config_json | str layout (the stored JSON text)
// with str = u64 byte length then the bytes, integers little-endian and
// lr_schedule keys in byte order (docs/checkpoint-format.md; the h5py test
// recomputes it).
std::uint64_t meta_checksum(const CheckpointMeta& m, const std::string& layout_text) {
  std::string b = "examoe-meta-1";
  auto u64 = [&](std::uint64_t x) {
    for (int k = 0; k < 8; ++k) b.push_back(static_cast<char>((x >> (8 * k)) & 0xffu));
  };
  auto str = [&](const std::string& x) {
    u64(x.size());
    b += x;
  };
  u64(m.step);
  u64(m.tokens_seen);
  u64(m.data_cursor);
  u64(m.rng_state.size());
  for (auto x : m.rng_state) u64(x);
  u64(m.lr_schedule.size());
  for (const auto& [k, v] : m.lr_schedule) {  // std::map: byte order of keys
    str(k);
    std::uint64_t bits;
    std::memcpy(&bits, &v, 8);
    u64(bits);
  }
  str(m.deck);
  str(m.config_json);
  str(layout_text);
  return kernels::checksum_leaf(b, 0);
}

}  // namespace

std::string meta_to_json(const CheckpointMeta& m) {
  nlohmann::json j;
  j["step"] = m.step;
  j["tokens_seen"] = m.tokens_seen;
  j["data_cursor"] = m.data_cursor;
  j["rng_state"] = m.rng_state;
  j["lr_schedule"] = m.lr_schedule;
  j["deck"] = m.deck;
  j["config_json"] = m.config_json;
  j["layout"] = m.layout.to_json();
  nlohmann::json st = nlohmann::json::object();
  for (const auto& [name, a] : m.state) st[name] = {{"shape", a.shape}, {"values", a.values}};
  j["state"] = st;
  return j.dump();
}

CheckpointMeta meta_from_json(const std::string& s) {
  const auto j = nlohmann::json::parse(s);
  CheckpointMeta m;
  m.step = j.at("step").get<std::uint64_t>();
  m.tokens_seen = j.at("tokens_seen").get<std::uint64_t>();
  m.data_cursor = j.at("data_cursor").get<std::uint64_t>();
  m.rng_state = j.at("rng_state").get<std::vector<std::uint64_t>>();
  m.lr_schedule = j.at("lr_schedule").get<std::map<std::string, double>>();
  m.deck = j.at("deck").get<std::string>();
  m.config_json = j.at("config_json").get<std::string>();
  m.layout = CheckpointLayout::from_json(j.at("layout").get<std::string>());
  for (const auto& [name, a] : j.at("state").items()) {
    m.state[name] =
        StateArray{a.at("shape").get<std::vector<std::int64_t>>(), a.at("values").get<std::vector<float>>()};
  }
  return m;
}

namespace detail {

std::uint64_t sum_of(const std::uint64_t* b, const std::uint64_t* e) {
  std::uint64_t s = 0;
  for (; b != e; ++b) s = kernels::checksum_combine(s, *b);
  return s;
}

std::uint64_t chunk_merkle_root(const std::vector<DatasetInfo>& ds) {
  std::vector<std::pair<std::string, std::uint64_t>> e;
  for (const auto& d : ds) {
    for (std::size_t k = 0; k < d.chunk_checksums.size(); ++k) {
      e.emplace_back(fmt::format("{}#{}", d.path, k), d.chunk_checksums[k]);
    }
  }
  return kernels::checksum_merkle_root(e);
}

void write_meta(hid_t root, const CheckpointMeta& m) {
  h5::write_i64(root, "format_version", kCheckpointFormatVersion);
  h5::write_u64(root, "step", m.step);
  h5::write_u64(root, "tokens_seen", m.tokens_seen);
  h5::write_u64(root, "data_cursor", m.data_cursor);
  h5::write_u64s(root, "rng_state", m.rng_state);
  for (const auto& [k, v] : m.lr_schedule) h5::write_f64(root, (kLrPrefix + k).c_str(), v);
  h5::write_string(root, "deck", m.deck);
  h5::write_string(root, "config_json", m.config_json);
  h5::write_string(root, "layout", m.layout.to_json());
  h5::write_string(root, "created_by", fmt::format("ExaMoE {} ({})", version_string(), git_hash()));
  h5::write_u64(root, "meta_checksum", meta_checksum(m, m.layout.to_json()));
}

CheckpointMeta read_meta(hid_t root, const std::string& file) {
  CheckpointMeta m;
  EXA_REQUIRE(h5::has_attr(root, "format_version"),
              "{} is not an ExaMoE checkpoint: its root group has no 'format_version' attribute", file);
  m.format_version = h5::read_i64(root, "format_version");
  if (m.format_version != kCheckpointFormatVersion) {
    const std::string by = h5::has_attr(root, "created_by") ? h5::read_string(root, "created_by") : "an unknown writer";
    throw Error(
        fmt::format("{} has checkpoint format version {} (written by {}); this ExaMoE ({}) reads version {}: "
                    "use a matching ExaMoE release",
                    file, m.format_version, by, version_string(), kCheckpointFormatVersion));
  }
  m.step = h5::read_u64(root, "step");
  m.tokens_seen = h5::read_u64(root, "tokens_seen");
  m.data_cursor = h5::read_u64(root, "data_cursor");
  m.rng_state = h5::read_u64s(root, "rng_state");
  for (const auto& a : h5::attr_names(root)) {
    if (a.compare(0, std::strlen(kLrPrefix), kLrPrefix) == 0) {
      m.lr_schedule[a.substr(std::strlen(kLrPrefix))] = h5::read_f64(root, a.c_str());
    }
  }
  m.deck = h5::read_string(root, "deck");
  m.config_json = h5::read_string(root, "config_json");
  const std::string layout = h5::read_string(root, "layout");
  m.merkle_root = h5::read_u64(root, "merkle_root");
  const std::uint64_t stored = h5::read_u64(root, "meta_checksum"), now = meta_checksum(m, layout);
  EXA_REQUIRE(stored == now || !kCheckMetaSums,
              "checkpoint file {} is corrupt: its attributes on / (step, tokens_seen, data_cursor, rng_state, "
              "lr_schedule.*, deck, config_json, layout) have checksum {} but were written with {}; {}",
              file, kernels::checksum_hex(now), kernels::checksum_hex(stored),
              fs_detail::older_checkpoints_hint(fs::path(file).parent_path().string()));
  m.layout = CheckpointLayout::from_json(layout);
  if (h5::has_attr(root, "created_by")) m.created_by = h5::read_string(root, "created_by");
  // Chunk checksums came later within version 1: files without them verify
  // per dataset.
  if (h5::has_attr(root, "chunk_elements")) {
    m.chunk_elements = h5::read_i64(root, "chunk_elements");
    EXA_REQUIRE(m.chunk_elements > 0, "checkpoint file {} is corrupt: its chunk_elements attribute is {}", file,
                m.chunk_elements);
    m.chunk_merkle_root = h5::read_u64(root, "chunk_merkle_root");
  }
  return m;
}

std::vector<DatasetInfo> list_datasets(hid_t file) {
  std::vector<DatasetInfo> out;
  for (const char* g : {kModelGroup, kExpAvgGroup, kExpAvgSqGroup, kResidualGroup, kStateGroup}) {
    if (!h5::link_exists(file, g)) continue;
    h5::Id grp = h5::group(H5Gopen2(file, g, H5P_DEFAULT), fmt::format("opening group {}", g));
    for (const auto& name : h5::link_names(grp)) {
      const std::string path = std::string(g) + "/" + name;
      {
        h5::Id obj = h5::check(H5Oopen(grp, name.c_str(), H5P_DEFAULT), H5Oclose, "opening " + path);
        if (H5Iget_type(obj) != H5I_DATASET) continue;
      }
      h5::Id d = h5::dataset(H5Dopen2(grp, name.c_str(), H5P_DEFAULT), "opening " + path);
      DatasetInfo info{path, h5::dataset_shape(d), 0};
      EXA_REQUIRE(h5::has_attr(d, "checksum"), "dataset {} has no 'checksum' attribute", path);
      info.checksum = h5::read_u64(d, "checksum");
      if (h5::has_attr(d, kChunkAttr)) info.chunk_checksums = h5::read_u64s(d, kChunkAttr);
      out.push_back(std::move(info));
    }
  }
  std::sort(out.begin(), out.end(), [](const DatasetInfo& a, const DatasetInfo& b) { return a.path < b.path; });
  return out;
}

void verify_merkle(const std::vector<DatasetInfo>& ds, const CheckpointMeta& meta, const std::string& file) {
  const std::uint64_t stored = meta.merkle_root;
  std::vector<std::pair<std::string, std::uint64_t>> e;
  for (const auto& d : ds) e.emplace_back(d.path, d.checksum);
  const std::uint64_t root = kernels::checksum_merkle_root(e);
  EXA_REQUIRE(root == stored || !kCheckMetaSums,
              "checkpoint file {} is corrupt: the Merkle root over its datasets' checksums is {} but the file "
              "records {} (a dataset or its checksum attribute was altered, added or removed); {}",
              file, kernels::checksum_hex(root), kernels::checksum_hex(stored),
              fs_detail::older_checkpoints_hint(fs::path(file).parent_path().string()));
  if (meta.chunk_elements == 0) return;
  // The chunk checksums: one per chunk, adding up to the dataset's, under
  // their own Merkle root.
  for (const auto& d : ds) {
    const std::int64_t n = chunk_count(model::whole_box(d.shape).numel(), meta.chunk_elements);
    const auto* c = d.chunk_checksums.data();
    EXA_REQUIRE(static_cast<std::int64_t>(d.chunk_checksums.size()) == n &&
                    (sum_of(c, c + d.chunk_checksums.size()) == d.checksum || !kCheckMetaSums),
                "checkpoint file {} is corrupt: dataset {} has {} chunk checksums adding up to {} where {} chunks "
                "adding up to its checksum {} belong; {}",
                file, d.path, d.chunk_checksums.size(), kernels::checksum_hex(sum_of(c, c + d.chunk_checksums.size())),
                n, kernels::checksum_hex(d.checksum),
                fs_detail::older_checkpoints_hint(fs::path(file).parent_path().string()));
  }
  const std::uint64_t croot = chunk_merkle_root(ds);
  EXA_REQUIRE(croot == meta.chunk_merkle_root || !kCheckMetaSums,
              "checkpoint file {} is corrupt: the Merkle root over its chunk checksums is {} but the file records {}; "
              "{}",
              file, kernels::checksum_hex(croot), kernels::checksum_hex(meta.chunk_merkle_root),
              fs_detail::older_checkpoints_hint(fs::path(file).parent_path().string()));
}

h5::Id open_file(const std::string& file, hid_t fapl) {
  const hid_t id = H5Fopen(file.c_str(), H5F_ACC_RDONLY, fapl);
  if (id < 0) {
    const std::string why = h5::error_stack();
    std::error_code ec;
    const auto size = fs::file_size(file, ec);
    throw Error(
        fmt::format("cannot read checkpoint file {} ({}): {}. The file is truncated or corrupt (a failed "
                    "copy, a full disk or file-system damage); {}",
                    file, ec ? std::string("size unknown") : fmt::format("{} bytes", size), why,
                    fs_detail::older_checkpoints_hint(fs::path(file).parent_path().string())));
  }
  return h5::Id(id, H5Fclose);
}

}  // namespace detail

}  // namespace exa::io
