// save_checkpoint: every rank's piece of every dataset written collectively
// into a new file under a temporary name, with its chunk checksums, then the
// directory published and older checkpoints retired (checkpoint_fs.hpp).
#include <fmt/format.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>

#include "comm/mpi_env.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "io/checkpoint/checkpoint.hpp"
#include "io/checkpoint/checkpoint_fs.hpp"
#include "io/checkpoint/checkpoint_internal.hpp"
#include "io/checkpoint/chunk_sums.hpp"
#include "io/checkpoint/h5.hpp"
#include "io/checkpoint/meta_json.hpp"
#include "kernels/checksum.hpp"

namespace exa::io {

namespace fs = std::filesystem;
using namespace detail;

namespace {

// What a message calls the elements [r.begin, r.end) of `box`'s flattening:
// "elements [a, b)" of a whole tensor, otherwise with the box.
std::string elements_str(const model::Box& box, const std::vector<std::int64_t>& shape, const FlatRange& r) {
  if (model::is_whole(box, shape)) return fmt::format("elements [{}, {})", r.begin, r.end);
  return fmt::format("elements [{}, {}) of the box {}", r.begin, r.end, model::box_str(box));
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

std::vector<std::pair<std::string, std::uint64_t>> sorted_entries(
    std::vector<std::pair<std::string, std::uint64_t>> e) {
  std::sort(e.begin(), e.end());
  return e;
}

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
  if (any_in(kResidualGroup)) gnames.push_back(kResidualGroup);
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
    h5::Id dxpl = transfer_for(dataset_bytes(it.shape));
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
  if (optim)
    for (auto& r : residual_items(tensors, *optim, comm, nullptr)) items.push_back(std::move(r.item));
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

}  // namespace exa::io
