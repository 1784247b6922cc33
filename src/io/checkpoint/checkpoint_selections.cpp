// HDF5 selections of the checkpoint library (checkpoint_internal.hpp): a
// rank's pieces as hyperslab unions of the global datasets and of its flat
// buffers, and the file access and transfer property lists for MPI-IO.
#include <algorithm>

#include "io/checkpoint/checkpoint_internal.hpp"
#include "io/checkpoint/flat_range.hpp"
#include "io/checkpoint/h5.hpp"

namespace exa::io::detail {

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

h5::Id transfer_for(std::uint64_t bytes) {
  h5::Id dxpl = h5::plist(H5Pcreate(H5P_DATASET_XFER), "H5Pcreate");
  h5::check(H5Pset_dxpl_mpio(dxpl, bytes >= kCollectiveTransferBytes ? H5FD_MPIO_COLLECTIVE : H5FD_MPIO_INDEPENDENT),
            "H5Pset_dxpl_mpio");
  return dxpl;
}

std::uint64_t dataset_bytes(const std::vector<std::int64_t>& shape) {
  std::uint64_t n = sizeof(float);
  for (const std::int64_t e : shape) n *= std::uint64_t(e);
  return n;
}

}  // namespace exa::io::detail
