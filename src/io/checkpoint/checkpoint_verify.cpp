// Rank-local checks of a checkpoint (serial HDF5 driver): its metadata and
// Merkle roots (inspect_checkpoint), every chunk read back against its
// checksum (verify_checkpoint), and whether it holds a given model's tensors.
#include <fmt/format.h>

#include <filesystem>

#include "core/error.hpp"
#include "io/checkpoint/checkpoint.hpp"
#include "io/checkpoint/checkpoint_internal.hpp"
#include "io/checkpoint/chunk_sums.hpp"
#include "io/checkpoint/h5.hpp"

namespace exa::io {

namespace fs = std::filesystem;
using namespace detail;

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
    // The one /state array inspect shows: expert growth's few events.
    const std::string hist = std::string(kStateGroup) + "/growth_history";
    if (h5::link_exists(f, hist)) {
      h5::Id ds = h5::dataset(H5Dopen2(f, hist.c_str(), H5P_DEFAULT), "opening " + hist);
      StateArray a{h5::dataset_shape(ds), {}};
      std::int64_t n = 1;
      for (auto x : a.shape) n *= x;
      a.values.resize(std::size_t(n));
      EXA_REQUIRE(h5::is_f32(ds) && a.shape.size() == 2 && a.shape[1] == 3, "{} in {} is not float32 [events, 3]",
                  hist, file);
      if (n > 0) h5::check(H5Dread(ds, H5T_NATIVE_FLOAT, H5S_ALL, H5S_ALL, H5P_DEFAULT, a.values.data()), "H5Dread");
      info.meta.state["growth_history"] = std::move(a);
    }
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
    for (const auto& p : specs)
      if (g == kModelGroup || p.trainable) expected.emplace_back(std::string(g) + "/" + p.name, p.shape);
  }
  check_datasets((fs::path(info.meta.directory) / kCheckpointFile).string(), expected, want_optim,
                 info.meta.has_optimizer, info.datasets);
}

}  // namespace exa::io
