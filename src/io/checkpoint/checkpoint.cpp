// HDF5 checkpoints: collective MPI-IO writes and reads of every rank's piece
// (a box of the tensor and a range of the box's row-major order) as
// hyperslabs of the global dataset, with layout-independent checksums.
#include "io/checkpoint/checkpoint.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <algorithm>
#include <climits>
#include <cstring>
#include <filesystem>
#include <nlohmann/json.hpp>
#include <set>

#include "core/build_info.hpp"
#include "comm/mpi_env.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "io/checkpoint/checkpoint_fs.hpp"
#include "io/checkpoint/chunk_sums.hpp"
#include "io/checkpoint/flat_range.hpp"
#include "io/checkpoint/h5.hpp"
#include "io/checkpoint/meta_json.hpp"
#include "io/checkpoint/piece_cover.hpp"
#include "kernels/checksum.hpp"

namespace exa::io {

namespace fs = std::filesystem;

// ---- small pieces -------------------------------------------------------------

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

std::vector<CheckpointTensor> checkpoint_tensors(const model::ParameterStore& params) {
  std::vector<CheckpointTensor> t;
  t.reserve(params.size());
  for (std::size_t i = 0; i < params.size(); ++i) {
    t.push_back(CheckpointTensor{params.spec(i).name, params.spec(i).shape, params.shard(i), params.value(i)});
  }
  return t;
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

std::string shape_str(const std::vector<std::int64_t>& s) { return fmt::format("[{}]", fmt::join(s, ", ")); }

// ---- MPI helpers --------------------------------------------------------------


void bcast_string(std::string& s, int root, MPI_Comm comm) {
  unsigned long long n = s.size();
  MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, root, comm);
  s.resize(static_cast<std::size_t>(n));
  // Chunks below INT_MAX bytes.
  for (std::size_t off = 0; off < s.size(); off += (1u << 30)) {
    const int len = static_cast<int>(std::min<std::size_t>(1u << 30, s.size() - off));
    MPI_Bcast(s.data() + off, len, MPI_CHAR, root, comm);
  }
}

// Every rank learns whether any rank failed; all then throw the message of
// the lowest failing rank.
void agree(MPI_Comm comm, const std::string& local_error) {
  const int me = comm_rank(comm);
  int mine = local_error.empty() ? INT_MAX : me, first = INT_MAX;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == INT_MAX) return;
  std::string msg = local_error;
  bcast_string(msg, first, comm);
  throw Error(msg);
}

// Runs f on every rank; if it throws on any, every rank throws the same error.
template <class F>
void phase(MPI_Comm comm, F&& f) {
  std::string err;
  try {
    f();
  } catch (const std::exception& e) {
    err = e.what();
    if (err.empty()) err = "unknown error";
  }
  agree(comm, err);
}

// ---- what goes where ------------------------------------------------------------

constexpr const char* kModelGroup = "/model";
constexpr const char* kOptimGroup = "/optim";
constexpr const char* kExpAvgGroup = "/optim/exp_avg";
constexpr const char* kExpAvgSqGroup = "/optim/exp_avg_sq";
constexpr const char* kStateGroup = "/state";

// One dataset as this rank sees it; the shard's box is filled in.
struct Item {
  std::string group, name;  // "/model", "embed.weight"
  std::vector<std::int64_t> shape;
  model::Shard shard;
  View1<float> view;
  std::string path() const { return group + "/" + name; }
};

// What a message calls the elements [r.begin, r.end) of `box`'s flattening:
// "elements [a, b)" of a whole tensor, otherwise with the box.
std::string elements_str(const model::Box& box, const std::vector<std::int64_t>& shape, const FlatRange& r) {
  if (model::is_whole(box, shape)) return fmt::format("elements [{}, {})", r.begin, r.end);
  return fmt::format("elements [{}, {}) of the box {}", r.begin, r.end, model::box_str(box));
}

void validate(const std::vector<CheckpointTensor>& tensors, const OptimizerState* optim) {
  std::set<std::string> names;
  for (const auto& t : tensors) {
    EXA_REQUIRE(!t.name.empty() && t.name.find('/') == std::string::npos && t.name != "." && t.name != "..",
                "checkpoint: tensor name '{}' cannot be an HDF5 dataset name (empty, '.', '..' or holding '/')",
                t.name);
    EXA_REQUIRE(names.insert(t.name).second, "checkpoint: tensor '{}' is listed twice", t.name);
    EXA_REQUIRE(!t.shape.empty(), "checkpoint: tensor '{}' has no dimensions (scalars are not supported)", t.name);
    for (auto s : t.shape)
      EXA_REQUIRE(s >= 0, "checkpoint: tensor '{}' has a negative extent in {}", t.name, shape_str(t.shape));
    model::resolve_shard(t.shard, t.name, t.shape);  // exa::Error when the box or range does not fit
    EXA_REQUIRE(static_cast<std::int64_t>(t.value.extent(0)) == t.shard.count,
                "checkpoint: tensor '{}' holds {} values but its shard has {} elements", t.name, t.value.extent(0),
                t.shard.count);
    if (optim) {
      auto it = optim->find(t.name);
      EXA_REQUIRE(it != optim->end(), "checkpoint: the optimizer state has no moments for tensor '{}'", t.name);
      EXA_REQUIRE(static_cast<std::int64_t>(it->second.exp_avg.extent(0)) == t.shard.count &&
                      static_cast<std::int64_t>(it->second.exp_avg_sq.extent(0)) == t.shard.count,
                  "checkpoint: the optimizer moments of '{}' hold {} and {} values but its shard has {} elements",
                  t.name, it->second.exp_avg.extent(0), it->second.exp_avg_sq.extent(0), t.shard.count);
    }
  }
  if (optim) {
    for (const auto& [name, m] : *optim) {
      EXA_REQUIRE(names.count(name) != 0, "checkpoint: the optimizer state names '{}', which is not a model tensor",
                  name);
    }
  }
}

std::vector<Item> items_of(const std::vector<CheckpointTensor>& tensors, const OptimizerState* optim) {
  std::vector<Item> items;
  auto shard = [](const CheckpointTensor& t) { return model::resolve_shard(t.shard, t.name, t.shape); };
  for (const auto& t : tensors) items.push_back(Item{kModelGroup, t.name, t.shape, shard(t), t.value});
  if (optim) {
    for (const auto& t : tensors)
      items.push_back(Item{kExpAvgGroup, t.name, t.shape, shard(t), optim->at(t.name).exp_avg});
    for (const auto& t : tensors) {
      items.push_back(Item{kExpAvgSqGroup, t.name, t.shape, shard(t), optim->at(t.name).exp_avg_sq});
    }
  }
  return items;
}

void validate_state(const CheckpointMeta& m) {
  for (const auto& [name, a] : m.state) {
    EXA_REQUIRE(!name.empty() && name.find('/') == std::string::npos && name != "." && name != "..",
                "checkpoint: state array name '{}' cannot be an HDF5 dataset name (empty, '.', '..' or holding '/')",
                name);
    EXA_REQUIRE(!a.shape.empty(), "checkpoint: state array '{}' has no dimensions", name);
    std::int64_t n = 1;
    for (auto x : a.shape) {
      EXA_REQUIRE(x >= 0, "checkpoint: state array '{}' has a negative extent in {}", name, shape_str(a.shape));
      n *= x;
    }
    EXA_REQUIRE(n == static_cast<std::int64_t>(a.values.size()),
                "checkpoint: state array '{}' of shape {} holds {} values", name, shape_str(a.shape), a.values.size());
  }
}

// A /state dataset: the whole array on every rank (replicas: rank 0 writes
// it, each rank reads all of it). The view is left empty (a load reads into
// host buffers).
Item state_item(const std::string& name, const std::vector<std::int64_t>& shape) {
  model::Shard s = model::resolve_shard(model::Shard{}, name, shape);
  s.count = s.box.numel();
  return Item{kStateGroup, name, shape, s, {}};
}

// `background`: the values are aliased, not copied (no Kokkos call; host
// backends only, which save_checkpoint checks).
std::vector<Item> state_items(const CheckpointMeta& m, bool background) {
  std::vector<Item> items;
  for (const auto& [name, a] : m.state) {
    Item it = state_item(name, a.shape);
    if (background) {
      it.view = View1<float>(const_cast<float*>(a.values.data()), a.values.size());
    } else {
      it.view = View1<float>(Kokkos::view_alloc(Kokkos::WithoutInitializing, "exa::ckpt::state"), a.values.size());
      Kokkos::deep_copy(it.view, HostFlat(const_cast<float*>(a.values.data()), a.values.size()));
    }
    items.push_back(std::move(it));
  }
  return items;
}

// Every rank must pass the same names, shapes and optimizer choice.
void check_same_everywhere(const std::vector<Item>& items, MPI_Comm comm) {
  std::string sig;
  for (const auto& it : items) sig += it.path() + shape_str(it.shape) + ";";
  const std::uint64_t h = kernels::checksum_leaf(sig, items.size());
  std::uint64_t lo = 0, hi = 0;
  MPI_Allreduce(&h, &lo, 1, MPI_UINT64_T, MPI_MIN, comm);
  MPI_Allreduce(&h, &hi, 1, MPI_UINT64_T, MPI_MAX, comm);
  EXA_REQUIRE(lo == hi,
              "checkpoint: the ranks disagree on the tensor list (names, shapes or whether optimizer state is "
              "included): every rank must pass the same tensors, each with its own shard");
}

// Every rank's piece of every item (box offset and extent, then the range
// in the box), and who writes what of each: covers[i]. Collective.
std::vector<PieceCover> gather_pieces(const std::vector<Item>& items, MPI_Comm comm) {
  const int P = comm_size(comm);
  std::vector<long long> mine;
  for (const auto& it : items) {
    for (auto x : it.shard.box.offset) mine.push_back(x);
    for (auto x : it.shard.box.extent) mine.push_back(x);
    mine.push_back(it.shard.offset);
    mine.push_back(it.shard.offset + it.shard.count);
  }
  // The same length on every rank: check_same_everywhere compared the shapes.
  const std::size_t W = mine.size();
  std::vector<long long> all(W * static_cast<std::size_t>(P));
  if (W > 0) {
    MPI_Allgather(mine.data(), static_cast<int>(W), MPI_LONG_LONG, all.data(), static_cast<int>(W), MPI_LONG_LONG,
                  comm);
  }
  std::vector<PieceCover> out;
  std::size_t at = 0;  // the item's first entry in a rank's record
  for (const auto& it : items) {
    const std::size_t n = it.shape.size();
    std::vector<Piece> pieces(static_cast<std::size_t>(P));
    for (int r = 0; r < P; ++r) {
      const long long* x = all.data() + static_cast<std::size_t>(r) * W + at;
      Piece& p = pieces[static_cast<std::size_t>(r)];
      p.box.offset.assign(x, x + n);
      p.box.extent.assign(x + n, x + 2 * n);
      p.range = FlatRange{x[2 * n], x[2 * n + 1]};
    }
    at += 2 * n + 2;
    out.emplace_back(it.shape, std::move(pieces), it.path());
  }
  return out;
}

// ---- HDF5 selections --------------------------------------------------------------

// Selects the union of ranges of a box's flattening in an N-d dataspace
// (none when empty). HDF5 lists a selection's elements in the dataspace's
// row-major order, which within one box is the box's own: the i-th element
// selected is the i-th of the ranges.
void select_ranges(hid_t space, const model::Box& box, const std::vector<FlatRange>& ranges) {
  h5::check(H5Sselect_none(space), "H5Sselect_none");
  const std::vector<hsize_t> ones(box.extent.size(), 1);
  for (const auto& r : ranges) {
    for (const auto& b : box_range_blocks(box.offset, box.extent, r.begin, r.size())) {
      const std::vector<hsize_t> start(b.start.begin(), b.start.end()), block(b.count.begin(), b.count.end());
      h5::check(H5Sselect_hyperslab(space, H5S_SELECT_OR, start.data(), nullptr, ones.data(), block.data()),
                "H5Sselect_hyperslab");
    }
  }
}

// A 1-D memory dataspace of n elements selecting the given ranges (local indices).
h5::Id memory_space(std::int64_t n, const std::vector<FlatRange>& ranges) {
  const hsize_t dim = static_cast<hsize_t>(std::max<std::int64_t>(n, 1));
  h5::Id sp = h5::space(H5Screate_simple(1, &dim, nullptr), "H5Screate_simple");
  select_ranges(sp, model::whole_box({static_cast<std::int64_t>(dim)}), ranges);
  return sp;
}

std::vector<FlatRange> shifted(const std::vector<FlatRange>& r, std::int64_t by) {
  std::vector<FlatRange> out;
  out.reserve(r.size());
  for (const auto& x : r) out.push_back({x.begin - by, x.end - by});
  return out;
}

// Where each item's chunk partials sit in one flat vector (so that one
// allreduce adds them all): offsets[i] .. offsets[i + 1].
std::vector<std::size_t> chunk_offsets(const std::vector<Item>& items, const std::vector<std::int64_t>& chunk_elems) {
  std::vector<std::size_t> off{0};
  for (std::size_t i = 0; i < items.size(); ++i) {
    off.push_back(off.back() +
                  static_cast<std::size_t>(chunk_count(model::whole_box(items[i].shape).numel(), chunk_elems[i])));
  }
  return off;
}

// Sums the chunk partials of all ranks.
std::vector<std::uint64_t> allreduce_sum(const std::vector<std::uint64_t>& partial, MPI_Comm comm) {
  std::vector<std::uint64_t> total(partial.size(), 0);
  for (std::size_t at = 0; at < partial.size(); at += (1u << 28)) {
    const int n = static_cast<int>(std::min<std::size_t>(1u << 28, partial.size() - at));
    MPI_Allreduce(partial.data() + at, total.data() + at, n, MPI_UINT64_T, MPI_SUM, comm);
  }
  return total;
}

std::uint64_t sum_of(const std::uint64_t* b, const std::uint64_t* e) {
  std::uint64_t s = 0;
  for (; b != e; ++b) s = kernels::checksum_combine(s, *b);
  return s;
}

h5::Id file_access(MPI_Comm comm) {
  h5::Id fapl = h5::plist(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate");
  h5::check(H5Pset_fapl_mpio(fapl, comm, MPI_INFO_NULL), "H5Pset_fapl_mpio");
  // v1.8 object headers: dense attribute storage (a long deck fits), and
  // every HDF5 >= 1.8 (h5py included) reads the file.
  h5::check(H5Pset_libver_bounds(fapl, H5F_LIBVER_V18, H5F_LIBVER_V18), "H5Pset_libver_bounds");
  // Metadata is read by one rank and broadcast, written collectively: the
  // program calls every metadata operation on all ranks in the same order.
  h5::check(H5Pset_all_coll_metadata_ops(fapl, 1), "H5Pset_all_coll_metadata_ops");
  h5::check(H5Pset_coll_metadata_write(fapl, 1), "H5Pset_coll_metadata_write");
  return fapl;
}

h5::Id collective_transfer() {
  h5::Id dxpl = h5::plist(H5Pcreate(H5P_DATASET_XFER), "H5Pcreate");
  h5::check(H5Pset_dxpl_mpio(dxpl, H5FD_MPIO_COLLECTIVE), "H5Pset_dxpl_mpio");
  return dxpl;
}

std::vector<std::pair<std::string, std::uint64_t>> sorted_entries(
    std::vector<std::pair<std::string, std::uint64_t>> e) {
  std::sort(e.begin(), e.end());
  return e;
}

// ---- meta -----------------------------------------------------------------------

constexpr const char* kLrPrefix = "lr_schedule.";
constexpr const char* kChunkAttr = "chunk_checksums";

// The Merkle tree over every chunk: leaves "<path>#<k>" with the
// chunk's checksum, datasets by path, chunks by index.
std::uint64_t chunk_merkle_root(const std::vector<DatasetInfo>& ds) {
  std::vector<std::pair<std::string, std::uint64_t>> e;
  for (const auto& d : ds) {
    for (std::size_t k = 0; k < d.chunk_checksums.size(); ++k) {
      e.emplace_back(fmt::format("{}#{}", d.path, k), d.chunk_checksums[k]);
    }
  }
  return kernels::checksum_merkle_root(e);
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

namespace {

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

// Reads the format version first: a file from another program or version
// must fail on that, not on some later attribute.
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

// Stored checksums of every dataset under /model and /optim (sorted by path)
// and a check that their Merkle root matches the one on "/".
std::vector<DatasetInfo> list_datasets(hid_t file) {
  std::vector<DatasetInfo> out;
  for (const char* g : {kModelGroup, kExpAvgGroup, kExpAvgSqGroup, kStateGroup}) {
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

// Runs f; an HDF5 failure inside (a damaged file) becomes a message naming the
// file and what to do.
template <class F>
void damaged_if_h5_fails(const std::string& file, F&& f) {
  try {
    f();
  } catch (const h5::Failure& e) {
    throw Error(fmt::format("checkpoint file {} is damaged ({}); {}", file, e.what(),
                            fs_detail::older_checkpoints_hint(fs::path(file).parent_path().string())));
  }
}

// ---- write ------------------------------------------------------------------------

void write_file(const std::string& file, const std::vector<Item>& items, const std::vector<PieceCover>& covers,
                const CheckpointMeta& meta, std::int64_t chunk_elements, bool background, MPI_Comm comm) {
  const int me = comm_rank(comm);
  h5::Id fapl = file_access(comm);
  h5::Id f = h5::file(H5Fcreate(file.c_str(), H5F_ACC_EXCL, H5P_DEFAULT, fapl), "creating " + file);
  std::vector<h5::Id> groups;
  auto any_in = [&](const char* g) {
    return std::any_of(items.begin(), items.end(), [&](const Item& i) { return i.group == g; });
  };
  std::vector<const char*> gnames = {kModelGroup};
  if (any_in(kExpAvgGroup)) gnames.insert(gnames.end(), {kOptimGroup, kExpAvgGroup, kExpAvgSqGroup});
  if (any_in(kStateGroup)) gnames.push_back(kStateGroup);
  // Links stay compact (messages in the group's object header, which the v2
  // format checksums) rather than moving to a fractal heap, whose blocks
  // carry no checksum: HDF5 then notices a damaged group instead of crashing
  // on it. 65535 is the most HDF5 allows, beyond any model's tensor count.
  h5::Id gcpl = h5::plist(H5Pcreate(H5P_GROUP_CREATE), "H5Pcreate");
  h5::check(H5Pset_link_phase_change(gcpl, 65535, 65535), "H5Pset_link_phase_change");
  for (const char* g : gnames) {
    groups.push_back(h5::group(H5Gcreate2(f, g, H5P_DEFAULT, gcpl, H5P_DEFAULT), fmt::format("creating {}", g)));
  }
  h5::Id dxpl = collective_transfer();
  h5::Id dcpl = h5::plist(H5Pcreate(H5P_DATASET_CREATE), "H5Pcreate");
  h5::check(H5Pset_layout(dcpl, H5D_CONTIGUOUS), "H5Pset_layout");
  h5::check(H5Pset_fill_time(dcpl, H5D_FILL_TIME_NEVER), "H5Pset_fill_time");
  h5::check(H5Pset_alloc_time(dcpl, H5D_ALLOC_TIME_EARLY), "H5Pset_alloc_time");

  std::vector<h5::Id> dsets;
  const auto at = chunk_offsets(items, std::vector<std::int64_t>(items.size(), chunk_elements));
  std::vector<std::uint64_t> partial(at.back(), 0);
  float dummy = 0;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const Item& it = items[i];
    const auto owned = covers[i].owned(me);
    const std::vector<hsize_t> dims(it.shape.begin(), it.shape.end());
    h5::Id fspace =
        h5::space(H5Screate_simple(static_cast<int>(dims.size()), dims.data(), nullptr), "H5Screate_simple");
    h5::Id d = h5::dataset(H5Dcreate2(f, it.path().c_str(), H5T_IEEE_F32LE, fspace, H5P_DEFAULT, dcpl, H5P_DEFAULT),
                           "creating dataset " + it.path());
    // Device values go through a host copy; host ones are used in place.
    HostFlat host = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), it.view);
    select_ranges(fspace, it.shard.box, owned);
    h5::Id mspace = memory_space(it.shard.count, shifted(owned, it.shard.offset));
    h5::check(H5Dwrite(d, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, it.shard.count > 0 ? host.data() : &dummy),
              "writing dataset " + it.path());
    std::vector<std::uint64_t> mine(at[i + 1] - at[i], 0);
    add_chunk_partials(host, it.shard.offset, model::box_index(it.shard, it.shape), owned, chunk_elements, mine,
                       background);
    std::copy(mine.begin(), mine.end(), partial.begin() + static_cast<std::ptrdiff_t>(at[i]));
    dsets.push_back(std::move(d));
  }
  // Each element was written (and its checksum term counted) by exactly one
  // rank, so the sums over ranks are the whole chunks' checksums.
  const std::vector<std::uint64_t> total = allreduce_sum(partial, comm);
  std::vector<std::pair<std::string, std::uint64_t>> entries;
  std::vector<DatasetInfo> chunks;
  for (std::size_t i = 0; i < items.size(); ++i) {
    const auto* c = total.data();
    DatasetInfo d{items[i].path(), items[i].shape, sum_of(c + at[i], c + at[i + 1]),
                  std::vector<std::uint64_t>(c + at[i], c + at[i + 1])};
    h5::write_u64(dsets[i], "checksum", d.checksum);
    h5::write_u64s(dsets[i], kChunkAttr, d.chunk_checksums);
    entries.emplace_back(d.path, d.checksum);
    chunks.push_back(std::move(d));
  }
  dsets.clear();
  std::sort(chunks.begin(), chunks.end(), [](const DatasetInfo& a, const DatasetInfo& b) { return a.path < b.path; });
  h5::Id root = h5::group(H5Gopen2(f, "/", H5P_DEFAULT), "opening /");
  write_meta(root, meta);
  h5::write_u64(root, "merkle_root", kernels::checksum_merkle_root(sorted_entries(entries)));
  h5::write_i64(root, "chunk_elements", chunk_elements);
  h5::write_u64(root, "chunk_merkle_root", chunk_merkle_root(chunks));
  root.reset();
  groups.clear();
  h5::check(f.close(), "closing (flushing) " + file);
}

}  // namespace

std::string save_checkpoint(const std::string& ckpt_dir, const std::vector<CheckpointTensor>& tensors,
                            const OptimizerState* optim, const CheckpointMeta& meta_in, MPI_Comm comm,
                            const SaveOptions& options) {
  h5::QuietErrors quiet;
  const int me = comm_rank(comm);
  phase(comm, [&] {
    validate(tensors, optim);
    validate_state(meta_in);
    EXA_REQUIRE(options.chunk_elements > 0, "checkpoint: SaveOptions::chunk_elements must be >= 1, not {}",
                options.chunk_elements);
    constexpr bool host_views = Kokkos::SpaceAccessibility<Kokkos::HostSpace, View1<float>::memory_space>::accessible;
    EXA_REQUIRE(!options.background || host_views,
                "checkpoint: a background (async) save needs host-accessible tensors; this build keeps them in "
                "device memory: set checkpoint.async = false");
  });
  // The metadata of rank 0 is the one written (its state arrays too).
  std::string meta_text = meta_to_json(meta_in);
  bcast_string(meta_text, 0, comm);
  const CheckpointMeta meta = meta_from_json(meta_text);
  std::vector<Item> items = items_of(tensors, optim);
  for (auto& it : state_items(meta, options.background)) items.push_back(std::move(it));
  phase(comm, [&] { check_same_everywhere(items, comm); });
  std::vector<PieceCover> covers;
  phase(comm, [&] { covers = gather_pieces(items, comm); });
  phase(comm, [&] {
    for (std::size_t i = 0; i < items.size(); ++i) {
      const auto& gaps = covers[i].gaps();
      EXA_REQUIRE(gaps.empty(),
                  "checkpoint: no rank holds {} of {} {}: the ranks' shards must together cover every tensor",
                  elements_str(gaps.front().box, items[i].shape, gaps.front().ranges.front()), items[i].path(),
                  shape_str(items[i].shape));
    }
  });
  std::string tmp, final_dir;
  try {
    phase(comm, [&] {
      if (me != 0) return;
      const fs::path dir(ckpt_dir);
      fs::create_directories(dir);
      const fs::path t = dir / fs_detail::temp_dir_name(meta.step, static_cast<long>(::getpid()));
      fs::remove_all(t);
      fs::create_directory(t);
      tmp = t.string();
      // The datasets' bytes and a margin for HDF5's metadata and the checksums.
      std::uint64_t bytes = std::uint64_t(1) << 20;
      for (const auto& it : items) bytes += 4 * static_cast<std::uint64_t>(model::whole_box(it.shape).numel());
      fs_detail::require_room(tmp, bytes + bytes / 32);
    });
    bcast_string(tmp, 0, comm);
    const std::string file = (fs::path(tmp) / kCheckpointFile).string();
    phase(comm, [&] { write_file(file, items, covers, meta, options.chunk_elements, options.background, comm); });
    if (options.before_publish) options.before_publish();
    // Every rank has closed the file (the phase ends in an allreduce).
    phase(comm, [&] {
      if (me == 0) final_dir = fs_detail::publish(ckpt_dir, tmp, meta.step);
    });
  } catch (const Error& e) {
    if (me == 0 && !tmp.empty()) {
      std::error_code ec;
      fs::remove_all(tmp, ec);
    }
    throw Error(fmt::format("saving checkpoint step {} in {} failed: {} (earlier checkpoints are untouched and "
                            "`latest` still names the newest of them). {}",
                            meta.step, ckpt_dir, e.what(), fs_detail::save_failure_hint(ckpt_dir)));
  }
  bcast_string(final_dir, 0, comm);

  if (me == 0) {
    // The new checkpoint is complete and `latest` names it: clean-up problems
    // are warnings, never a failed save.
    try {
      for (const auto& d : fs_detail::apply_retention(ckpt_dir, options.keep, final_dir)) {
        log::debug("checkpoint: deleted {} (keep = {})", d, options.keep);
      }
      if (options.remove_stale_temps) {
        for (const auto& d : fs_detail::remove_stale_work(ckpt_dir)) log::info("checkpoint: removed leftover {}", d);
      }
    } catch (const std::exception& e) {
      log::warn("checkpoint {} is saved, but cleaning up older ones failed: {}", final_dir, e.what());
    }
  }
  MPI_Barrier(comm);
  return final_dir;
}

std::string save_checkpoint(const std::string& ckpt_dir, const model::ParameterStore& params,
                            const OptimizerState* optim, const CheckpointMeta& meta, MPI_Comm comm,
                            const SaveOptions& options) {
  return save_checkpoint(ckpt_dir, checkpoint_tensors(params), optim, meta, comm, options);
}

// ---- read -------------------------------------------------------------------------

namespace {

// The file `path` names, resolved on rank 0 and broadcast.
std::string resolve_file(const std::string& path, MPI_Comm comm) {
  std::string dir;
  phase(comm, [&] {
    if (comm_rank(comm) == 0) dir = resolve_checkpoint(path);
  });
  bcast_string(dir, 0, comm);
  return (fs::path(dir) / kCheckpointFile).string();
}

// The datasets a model's tensors (and their moments) occupy: path and shape.
using Expected = std::vector<std::pair<std::string, std::vector<std::int64_t>>>;

// What every reader checks before any data is read: the file's datasets are
// exactly the model's (names and shapes), with optimizer state when wanted.
void check_datasets(const std::string& file, const Expected& expected, bool want_optim, bool has_optim,
                    const std::vector<DatasetInfo>& present) {
  const std::string fix =
      "the checkpoint was written for a different model: load it with the deck it was written "
      "with (stored in the file: h5dump -a deck), or start from scratch";
  if (want_optim && !has_optim) {
    throw Error(
        fmt::format("{} holds no optimizer state (no {} group): it was saved without it. Load the model "
                    "only (eval, generate, fine-tuning with fresh optimizer state)",
                    file, kExpAvgGroup));
  }
  std::map<std::string, const DatasetInfo*> by_path;
  for (const auto& d : present) by_path[d.path] = &d;
  for (const auto& [path, shape] : expected) {
    if (by_path.count(path) == 0) {
      throw Error(fmt::format("{} has no dataset {} {}, which the model needs; {}", file, path, shape_str(shape), fix));
    }
  }
  std::set<std::string> paths;
  for (const auto& e : expected) paths.insert(e.first);
  for (const auto& d : present) {
    if (d.path.compare(0, std::strlen(kModelGroup) + 1, std::string(kModelGroup) + "/") == 0 &&
        paths.count(d.path) == 0) {
      throw Error(fmt::format("{} holds dataset {} {}, which this model does not have; {}", file, d.path,
                              shape_str(d.shape), fix));
    }
  }
  for (const auto& [path, shape] : expected) {
    const auto& got = by_path.at(path)->shape;
    if (got != shape) {
      throw Error(fmt::format("dataset {} in {} has shape {} but the model expects {}; {}", path, file,
                              shape_str(got), shape_str(shape), fix));
    }
  }
}

void check_structure(hid_t f, const std::string& file, const std::vector<Item>& items, bool want_optim,
                     bool has_optim, const std::vector<DatasetInfo>& present) {
  Expected expected;
  for (const auto& it : items) expected.emplace_back(it.path(), it.shape);
  check_datasets(file, expected, want_optim, has_optim, present);
  for (const auto& it : items) {
    h5::Id d = h5::dataset(H5Dopen2(f, it.path().c_str(), H5P_DEFAULT), "opening " + it.path());
    EXA_REQUIRE(h5::is_f32(d), "dataset {} in {} holds {} values; ExaMoE checkpoints hold float32", it.path(), file,
                h5::describe_type(d));
  }
}

// Collective: reads the given ranges of a box of a dataset (this rank's
// share of the elements no rank loads; empty on all but one rank) and adds
// their checksum terms to the chunk partials.
void add_gap_partials(hid_t d, hid_t fspace, const std::vector<std::int64_t>& shape, const model::Box& box,
                      const std::vector<FlatRange>& ranges, hid_t dxpl, std::int64_t chunk_elements,
                      std::vector<std::uint64_t>& partial) {
  std::vector<FlatRange> local;  // the same ranges, packed in a buffer
  std::int64_t n = 0;
  for (const auto& r : ranges) {
    local.push_back({n, n + r.size()});
    n += r.size();
  }
  HostFlat buf(Kokkos::view_alloc(Kokkos::WithoutInitializing, "exa::ckpt::gaps"), static_cast<std::size_t>(n));
  float dummy = 0;
  select_ranges(fspace, box, ranges);
  h5::Id ms = memory_space(n, local);
  h5::check(H5Dread(d, H5T_NATIVE_FLOAT, ms, fspace, dxpl, n > 0 ? buf.data() : &dummy), "reading a dataset");
  const auto map = kernels::box_index(shape, box.offset, box.extent);
  for (std::size_t k = 0; k < ranges.size(); ++k) {
    const auto part = Kokkos::subview(
        buf, Kokkos::make_pair(static_cast<std::size_t>(local[k].begin), static_cast<std::size_t>(local[k].end)));
    add_chunk_partials(part, ranges[k].begin, map, {ranges[k]}, chunk_elements, partial);
  }
}

// The chunk size a file's datasets are verified in: its own, or the whole
// dataset as one chunk (files written before chunk checksums).
std::int64_t verify_chunk(const CheckpointMeta& meta, const std::vector<std::int64_t>& shape) {
  if (meta.chunk_elements > 0) return meta.chunk_elements;
  return std::max<std::int64_t>(1, model::whole_box(shape).numel());
}

// What chunk k of dataset d was written with.
std::uint64_t stored_chunk(const DatasetInfo& d, std::int64_t k) {
  return d.chunk_checksums.empty() ? d.checksum : d.chunk_checksums[static_cast<std::size_t>(k)];
}

std::string chunk_str(const CheckpointMeta& meta, std::int64_t k, const FlatRange& r) {
  if (meta.chunk_elements == 0) return "";
  return fmt::format(" chunk {} (elements [{}, {}))", k, r.begin, r.end);
}

// Collective: this rank's shard of `it` read from file `f` into a new host
// buffer, and the checksum terms of what it owns (rank 0: and of the
// elements no rank loads) added to the chunk partials `sums`.
HostFlat read_item(hid_t f, const std::string& file, const Item& it, const PieceCover& cover, int me, hid_t dxpl,
                   std::int64_t chunk_elements, std::vector<std::uint64_t>& sums) {
  h5::Id d = h5::dataset(H5Dopen2(f, it.path().c_str(), H5P_DEFAULT), "opening " + it.path());
  h5::Id fspace = h5::space(H5Dget_space(d), "H5Dget_space");
  const FlatRange mine{it.shard.offset, it.shard.offset + it.shard.count};
  HostFlat buf(Kokkos::view_alloc(Kokkos::WithoutInitializing, "exa::ckpt::read"),
               static_cast<std::size_t>(it.shard.count));
  std::vector<FlatRange> sel;
  if (mine.size() > 0) sel.push_back(mine);
  select_ranges(fspace, it.shard.box, sel);
  h5::Id mspace = memory_space(it.shard.count, shifted(sel, it.shard.offset));
  float dummy = 0;
  h5::check(H5Dread(d, H5T_NATIVE_FLOAT, mspace, fspace, dxpl, it.shard.count > 0 ? buf.data() : &dummy),
            fmt::format("reading dataset {} of {}", it.path(), file));
  add_chunk_partials(buf, it.shard.offset, model::box_index(it.shard, it.shape), cover.owned(me), chunk_elements,
                     sums);
  // Elements nobody loads still count: rank 0 reads them for the checksum,
  // one collective read per gap (the same list on every rank).
  for (const auto& gap : cover.gaps()) {
    add_gap_partials(d, fspace, it.shape, gap.box, me == 0 ? gap.ranges : std::vector<FlatRange>{}, dxpl,
                     chunk_elements, sums);
  }
  return buf;
}

// A chunk that failed verification: item index and chunk index (the same
// list on every rank).
struct BadChunk {
  std::size_t item;
  std::int64_t chunk;
};

// Collective: repairs the bad chunks from `copy` (another copy of the same
// checkpoint, e.g. another storage tier's): each chunk whose elements read
// from the copy match the checksum the damaged file stored replaces those
// elements of this rank's buffers. Returns the chunks it could not repair
// and, in `why`, the reason when the copy could not be used at all.
std::vector<BadChunk> repair_chunks(const std::string& copy, const std::string& file, const std::vector<Item>& items,
                                    const std::vector<PieceCover>& covers, const std::vector<const DatasetInfo*>& info,
                                    const std::vector<std::int64_t>& chunk_elems, const CheckpointMeta& meta,
                                    const std::vector<BadChunk>& bad, std::vector<HostFlat>& bufs, MPI_Comm comm,
                                    std::string& why) {
  const int me = comm_rank(comm);
  std::string cfile;
  try {
    cfile = resolve_file(copy, comm);
    h5::Id fapl = file_access(comm);
    h5::Id f;
    phase(comm, [&] { f = open_file(cfile, fapl); });
    phase(comm, [&] {
      damaged_if_h5_fails(cfile, [&] {
        h5::Id root = h5::group(H5Gopen2(f, "/", H5P_DEFAULT), "opening /");
        const CheckpointMeta cm = read_meta(root, cfile);
        verify_merkle(list_datasets(f), cm, cfile);
        // Equal chunk Merkle roots: every chunk checksum is the same, so the
        // copy holds the same values (where it is intact).
        EXA_REQUIRE(cm.step == meta.step && cm.chunk_elements == meta.chunk_elements &&
                        cm.chunk_merkle_root == meta.chunk_merkle_root,
                    "{} is not a copy of {} (step {}, chunk Merkle root {}; the damaged file has step {}, {})",
                    cfile, file, cm.step, kernels::checksum_hex(cm.chunk_merkle_root), meta.step,
                    kernels::checksum_hex(meta.chunk_merkle_root));
      });
    });
    std::vector<BadChunk> left;
    h5::Id dxpl = collective_transfer();
    for (std::size_t b = 0; b < bad.size();) {
      const std::size_t i = bad[b].item;
      const Item& it = items[i];
      const std::int64_t numel = model::whole_box(it.shape).numel();
      std::vector<std::uint64_t> sums(static_cast<std::size_t>(chunk_count(numel, chunk_elems[i])), 0);
      HostFlat got;
      phase(comm, [&] {
        damaged_if_h5_fails(cfile, [&] { got = read_item(f, cfile, it, covers[i], me, dxpl, chunk_elems[i], sums); });
      });
      const std::vector<std::uint64_t> total = allreduce_sum(sums, comm);
      const auto map = model::box_index(it.shard, it.shape);
      for (; b < bad.size() && bad[b].item == i; ++b) {
        const std::int64_t k = bad[b].chunk;
        if (total[static_cast<std::size_t>(k)] != stored_chunk(*info[i], k)) {
          left.push_back(bad[b]);
          continue;
        }
        const FlatRange r = chunk_range(k, numel, chunk_elems[i]);
        for (std::int64_t j = 0; j < it.shard.count; ++j) {
          const auto g = static_cast<std::int64_t>(map(static_cast<std::uint64_t>(it.shard.offset + j)));
          if (g >= r.begin && g < r.end) bufs[i](static_cast<std::size_t>(j)) = got(static_cast<std::size_t>(j));
        }
        if (me == 0)
          log::warn("checkpoint: {}{} of {} failed verification; repaired from the copy {}", it.path(),
                    chunk_str(meta, k, r), file, cfile);
      }
    }
    return left;
  } catch (const Error& e) {  // on every rank alike (phase)
    why = e.what();
    return bad;
  }
}

// load_checkpoint of one file, its damaged chunks repaired from `copies`.
CheckpointMeta load_from(const std::string& path, const std::vector<CheckpointTensor>& tensors,
                         const OptimizerState* optim, MPI_Comm comm, const std::vector<std::string>& copies) {
  h5::QuietErrors quiet;
  const int me = comm_rank(comm);
  phase(comm, [&] { validate(tensors, optim); });
  std::vector<Item> items = items_of(tensors, optim);
  phase(comm, [&] { check_same_everywhere(items, comm); });
  std::vector<PieceCover> covers;
  phase(comm, [&] { covers = gather_pieces(items, comm); });
  const std::string file = resolve_file(path, comm);

  h5::Id fapl = file_access(comm);
  h5::Id f;
  phase(comm, [&] { f = open_file(file, fapl); });

  CheckpointMeta meta;
  std::vector<DatasetInfo> present;
  phase(comm, [&] {
    damaged_if_h5_fails(file, [&] {
      h5::Id root = h5::group(H5Gopen2(f, "/", H5P_DEFAULT), "opening /");
      meta = read_meta(root, file);
      present = list_datasets(f);
      verify_merkle(present, meta, file);
      meta.has_optimizer = h5::link_exists(f, kExpAvgGroup);
      check_structure(f, file, items, optim != nullptr, meta.has_optimizer, present);
    });
  });
  // Every /state array the file holds is read whole on every rank (the same
  // list everywhere: the ranks read the same metadata).
  const std::size_t n_tensor_items = items.size();
  phase(comm, [&] {
    damaged_if_h5_fails(file, [&] {
      const std::string prefix = std::string(kStateGroup) + "/";
      for (const auto& d : present) {
        if (d.path.compare(0, prefix.size(), prefix) != 0) continue;
        h5::Id ds = h5::dataset(H5Dopen2(f, d.path.c_str(), H5P_DEFAULT), "opening " + d.path);
        EXA_REQUIRE(h5::is_f32(ds), "dataset {} in {} holds {} values; ExaMoE checkpoints hold float32", d.path,
                    file, h5::describe_type(ds));
        items.push_back(state_item(d.path.substr(prefix.size()), d.shape));
      }
    });
  });
  {
    std::vector<Item> added(items.begin() + static_cast<std::ptrdiff_t>(n_tensor_items), items.end());
    std::vector<PieceCover> more;
    phase(comm, [&] { more = gather_pieces(added, comm); });
    for (auto& c : more) covers.push_back(std::move(c));
  }

  // Read every shard into host buffers and checksum what this rank owns,
  // plus (rank 0) the elements no rank asked for, chunk by chunk, so that
  // the partials of all ranks add up to each chunk's whole checksum. Nothing
  // reaches the caller's Views before every checksum has been verified.
  std::vector<const DatasetInfo*> info(items.size());
  std::vector<std::int64_t> chunk_elems(items.size());
  for (std::size_t i = 0; i < items.size(); ++i) {
    auto it =
        std::find_if(present.begin(), present.end(), [&](const DatasetInfo& d) { return d.path == items[i].path(); });
    EXA_ASSERT(it != present.end());
    info[i] = &*it;
    chunk_elems[i] = verify_chunk(meta, items[i].shape);
  }
  const auto at = chunk_offsets(items, chunk_elems);
  std::vector<HostFlat> bufs(items.size());
  std::vector<std::uint64_t> partial(at.back(), 0);
  phase(comm, [&] {
    damaged_if_h5_fails(file, [&] {
      h5::Id dxpl = collective_transfer();
      for (std::size_t i = 0; i < items.size(); ++i) {
        std::vector<std::uint64_t> sums(at[i + 1] - at[i], 0);
        bufs[i] = read_item(f, file, items[i], covers[i], me, dxpl, chunk_elems[i], sums);
        std::copy(sums.begin(), sums.end(), partial.begin() + static_cast<std::ptrdiff_t>(at[i]));
      }
    });
  });
  const std::vector<std::uint64_t> total = allreduce_sum(partial, comm);
  std::vector<BadChunk> bad;  // the same list on every rank: `total` is
  for (std::size_t i = 0; i < items.size(); ++i) {
    for (std::int64_t k = 0; k < static_cast<std::int64_t>(at[i + 1] - at[i]); ++k)
      if (total[at[i] + static_cast<std::size_t>(k)] != stored_chunk(*info[i], k)) bad.push_back({i, k});
  }
  std::vector<std::string> unusable;  // copies that could not be read at all, and why
  for (const auto& copy : copies) {
    if (bad.empty()) break;
    std::string why;
    bad = repair_chunks(copy, file, items, covers, info, chunk_elems, meta, bad, bufs, comm, why);
    if (!why.empty()) unusable.push_back(why);
  }
  if (!bad.empty()) {
    std::vector<std::string> what;
    for (const auto& b : bad) {
      const std::int64_t numel = model::whole_box(items[b.item].shape).numel();
      what.push_back(fmt::format("{}{} reads back with checksum {} but was written with {}", items[b.item].path(),
                                 chunk_str(meta, b.chunk, chunk_range(b.chunk, numel, chunk_elems[b.item])),
                                 kernels::checksum_hex(total[at[b.item] + static_cast<std::size_t>(b.chunk)]),
                                 kernels::checksum_hex(stored_chunk(*info[b.item], b.chunk))));
    }
    constexpr std::size_t kShown = 8;
    const std::size_t n = what.size();
    if (n > kShown) what.resize(kShown);
    const std::string copies_said =
        copies.empty() ? std::string()
                       : fmt::format(" (no copy holds {} intact{}{})", n == 1 ? "it" : "them", unusable.empty() ? "" : ": ",
                                     fmt::join(unusable, "; "));
    throw Error(fmt::format("checkpoint file {} is corrupt: {}{}{}{}; nothing was loaded. {}", file,
                            n == 1 ? "dataset " : fmt::format("{} chunks changed: ", n), fmt::join(what, ", "),
                            n > kShown ? ", ..." : "", copies_said,
                            fs_detail::older_checkpoints_hint(fs::path(file).parent_path().string())));
  }
  f.reset();

  for (std::size_t i = 0; i < n_tensor_items; ++i) Kokkos::deep_copy(items[i].view, bufs[i]);
  for (std::size_t i = n_tensor_items; i < items.size(); ++i) {
    const float* v = bufs[i].data();
    meta.state[items[i].name] = StateArray{items[i].shape, std::vector<float>(v, v + bufs[i].extent(0))};
  }
  Kokkos::fence();
  meta.directory = fs::path(file).parent_path().string();
  return meta;
}

}  // namespace

CheckpointMeta load_checkpoint(const std::string& path, const std::vector<CheckpointTensor>& tensors,
                               const OptimizerState* optim, MPI_Comm comm, const LoadOptions& options) {
  if (options.copies.empty()) return load_from(path, tensors, optim, comm, {});
  try {
    return load_from(path, tensors, optim, comm, options.copies);
  } catch (const Error& e) {
    // Not repairable chunk by chunk (its metadata is damaged, or a chunk is
    // damaged in every copy): a copy whole, if one loads (nothing reached
    // the tensors yet; every rank is here alike).
    std::string why = e.what();
    for (std::size_t c = 0; c < options.copies.size(); ++c) {
      if (comm_rank(comm) == 0) log::warn("checkpoint: {}; loading the copy {} instead", e.what(), options.copies[c]);
      std::vector<std::string> others = options.copies;
      others.erase(others.begin() + static_cast<std::ptrdiff_t>(c));
      try {
        return load_from(options.copies[c], tensors, optim, comm, others);
      } catch (const Error& e2) {
        why += fmt::format("; and its copy {} did not load either: {}", options.copies[c], e2.what());
      }
    }
    throw Error(why);
  }
}

CheckpointMeta load_checkpoint(const std::string& path, model::ParameterStore& params, const OptimizerState* optim,
                               MPI_Comm comm, const LoadOptions& options) {
  return load_checkpoint(path, checkpoint_tensors(params), optim, comm, options);
}

CheckpointInfo inspect_checkpoint(const std::string& path) {
  h5::QuietErrors quiet;
  const std::string file = (fs::path(resolve_checkpoint(path)) / kCheckpointFile).string();
  h5::Id fapl = h5::plist(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate");
  h5::check(H5Pset_fapl_sec2(fapl), "H5Pset_fapl_sec2");
  h5::Id f = open_file(file, fapl);
  CheckpointInfo info;
  damaged_if_h5_fails(file, [&] {
    h5::Id root = h5::group(H5Gopen2(f, "/", H5P_DEFAULT), "opening /");
    info.meta = read_meta(root, file);
    info.datasets = list_datasets(f);
    verify_merkle(info.datasets, info.meta, file);
    info.meta.has_optimizer = h5::link_exists(f, kExpAvgGroup);
  });
  info.meta.directory = fs::path(file).parent_path().string();
  return info;
}

VerifyResult verify_checkpoint(const std::string& path) {
  VerifyResult out;
  out.info = inspect_checkpoint(path);
  out.file = (fs::path(out.info.meta.directory) / kCheckpointFile).string();
  h5::QuietErrors quiet;
  h5::Id fapl = h5::plist(H5Pcreate(H5P_FILE_ACCESS), "H5Pcreate");
  h5::check(H5Pset_fapl_sec2(fapl), "H5Pset_fapl_sec2");
  h5::Id f = open_file(out.file, fapl);
  damaged_if_h5_fails(out.file, [&] {
    for (const auto& d : out.info.datasets) {
      h5::Id ds = h5::dataset(H5Dopen2(f, d.path.c_str(), H5P_DEFAULT), "opening " + d.path);
      EXA_REQUIRE(h5::is_f32(ds), "dataset {} in {} holds {} values; ExaMoE checkpoints hold float32", d.path,
                  out.file, h5::describe_type(ds));
      h5::Id fspace = h5::space(H5Dget_space(ds), "H5Dget_space");
      const model::Box whole = model::whole_box(d.shape);
      const std::int64_t numel = whole.numel(), C = verify_chunk(out.info.meta, d.shape);
      const auto map = kernels::box_index(d.shape, whole.offset, whole.extent);
      std::vector<std::uint64_t> sum(static_cast<std::size_t>(chunk_count(numel, C)), 0);
      for (std::int64_t k = 0; k < chunk_count(numel, C); ++k) {
        const FlatRange r = chunk_range(k, numel, C);
        HostFlat buf(Kokkos::view_alloc(Kokkos::WithoutInitializing, "exa::ckpt::verify"),
                     static_cast<std::size_t>(r.size()));
        select_ranges(fspace, whole, {r});
        h5::Id ms = memory_space(r.size(), {FlatRange{0, r.size()}});
        h5::check(H5Dread(ds, H5T_NATIVE_FLOAT, ms, fspace, H5P_DEFAULT, buf.data()),
                  fmt::format("reading dataset {} of {}", d.path, out.file));
        add_chunk_partials(buf, r.begin, map, {r}, C, sum);
        ++out.chunks_checked;
        if (sum[static_cast<std::size_t>(k)] != stored_chunk(d, k)) {
          out.mismatches.push_back(ChunkMismatch{d.path, k, r, stored_chunk(d, k), sum[static_cast<std::size_t>(k)]});
        }
      }
    }
  });
  return out;
}

void require_matching_model(const CheckpointInfo& info, const std::vector<model::ParamSpec>& specs,
                            bool want_optim) {
  Expected expected;
  for (const char* g : {kModelGroup, kExpAvgGroup, kExpAvgSqGroup}) {
    if (g != kModelGroup && !want_optim) break;
    for (const auto& p : specs) expected.emplace_back(std::string(g) + "/" + p.name, p.shape);
  }
  check_datasets((fs::path(info.meta.directory) / kCheckpointFile).string(), expected, want_optim,
                 info.meta.has_optimizer, info.datasets);
}

}  // namespace exa::io
