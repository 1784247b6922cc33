// load_checkpoint: the file's structure checked against the tensors, every
// rank's shard read collectively and verified chunk by chunk before anything
// reaches the caller's Views, damaged chunks repaired from other copies.
#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstring>
#include <filesystem>
#include <map>
#include <set>

#include "comm/mpi_env.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "io/checkpoint/checkpoint.hpp"
#include "io/checkpoint/checkpoint_fs.hpp"
#include "io/checkpoint/checkpoint_internal.hpp"
#include "io/checkpoint/chunk_sums.hpp"
#include "io/checkpoint/h5.hpp"
#include "kernels/checksum.hpp"

namespace exa::io {

namespace fs = std::filesystem;
using namespace detail;

namespace detail {

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

std::int64_t verify_chunk(const CheckpointMeta& meta, const std::vector<std::int64_t>& shape) {
  if (meta.chunk_elements > 0) return meta.chunk_elements;
  return std::max<std::int64_t>(1, model::whole_box(shape).numel());
}

std::uint64_t stored_chunk(const DatasetInfo& d, std::int64_t k) {
  return d.chunk_checksums.empty() ? d.checksum : d.chunk_checksums[static_cast<std::size_t>(k)];
}

}  // namespace detail

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
    for (std::size_t b = 0; b < bad.size();) {
      const std::size_t i = bad[b].item;
      const Item& it = items[i];
      const std::int64_t numel = model::whole_box(it.shape).numel();
      std::vector<std::uint64_t> sums(static_cast<std::size_t>(chunk_count(numel, chunk_elems[i])), 0);
      HostFlat got;
      phase(comm, [&] {
        damaged_if_h5_fails(cfile, [&] {
          h5::Id dxpl = transfer_for(dataset_bytes(it.shape));
          got = read_item(f, cfile, it, covers[i], me, dxpl, chunk_elems[i], sums);
        });
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
  // Top-k's residual rows, of the tensors the file holds them for (a file
  // without them leaves those residuals at zero).
  const std::size_t n_state_end = items.size();
  std::vector<ResidualItem> residuals;
  if (optim) {
    std::map<std::string, std::int64_t> rows;
    phase(comm, [&] {
      const std::string prefix = std::string(kResidualGroup) + "/";
      std::map<std::string, const std::vector<std::int64_t>*> shapes;
      for (const auto& t : tensors) shapes[t.name] = &t.shape;
      for (const auto& d : present) {
        if (d.path.compare(0, prefix.size(), prefix) != 0) continue;
        const std::string name = d.path.substr(prefix.size());
        const auto it = shapes.find(name);
        if (it == shapes.end()) continue;  // a tensor this run does not save (check_structure vouched for /model)
        EXA_REQUIRE(d.shape.size() == it->second->size() + 1 &&
                        std::equal(it->second->begin(), it->second->end(), d.shape.begin() + 1),
                    "dataset {} in {} has shape {}, not [holders, {}]; the checkpoint was written for a different "
                    "model: load it with the deck it was written with, or start from scratch",
                    d.path, file, shape_str(d.shape), shape_str(*it->second));
        rows[name] = d.shape[0];
      }
    });
    residuals = residual_items(tensors, *optim, comm, &rows);
    bool missing = false;
    for (const auto& [name, m] : *optim) {
      if (!m.has_residual || rows.count(name) != 0) continue;
      missing = true;
      if (m.residual.extent(0) > 0) Kokkos::deep_copy(m.residual, 0.0f);
    }
    if (missing && me == 0)
      log::info("checkpoint: {} holds no top-k residuals for some tensors (it was written without "
                "comm.compression = \"topk\"): their error feedback starts from zero", file);
    for (const auto& r : residuals) items.push_back(r.item);
  }
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
      for (std::size_t i = 0; i < items.size(); ++i) {
        std::vector<std::uint64_t> sums(at[i + 1] - at[i], 0);
        h5::Id dxpl = transfer_for(dataset_bytes(items[i].shape));
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
  for (std::size_t i = n_tensor_items; i < n_state_end; ++i) {
    const float* v = bufs[i].data();
    meta.state[items[i].name] = StateArray{items[i].shape, std::vector<float>(v, v + bufs[i].extent(0))};
  }
  // Holder j of a box takes the rows k = j, j + holders, ... (in that
  // order): in the layout that wrote them, its own row alone.
  for (std::size_t r = 0; r < residuals.size(); ++r) {
    const ResidualItem& ri = residuals[r];
    if (ri.holder < 0) continue;
    const HostFlat& rows = bufs[n_state_end + r];
    const auto n = std::int64_t(ri.residual.extent(0));
    const std::int64_t file_rows = ri.item.shape[0];
    auto dst = Kokkos::create_mirror_view(ri.residual);
    Kokkos::deep_copy(dst, 0.0f);
    for (std::int64_t k = ri.holder; k < file_rows; k += ri.holders)
      for (std::int64_t e = 0; e < n; ++e) dst(std::size_t(e)) += rows(std::size_t(k * n + e));
    Kokkos::deep_copy(ri.residual, dst);
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

}  // namespace exa::io
