#pragma once
// HDF5 checkpoints: collective MPI-IO writes and reads of every rank's piece
// (a box of the tensor and a range of the box's row-major order) as
// hyperslabs of the global dataset, with layout-independent checksums.
//
// Private to the checkpoint library (examoe_checkpoint, src/io/checkpoint/):
// what its checkpoint_*.cpp files share. Callers include checkpoint.hpp,
// never this; it pulls in hdf5.h (through h5.hpp), a private dependency.
//
//   checkpoint_items.cpp       what goes where: items, validation, piece covers
//   checkpoint_mpi.cpp         MPI helpers: broadcasts, agreeing on errors, sums
//   checkpoint_selections.cpp  HDF5 selections and property lists
//   checkpoint_meta.cpp        attributes on "/", checksums and Merkle roots
//   checkpoint_write.cpp       save_checkpoint
//   checkpoint_read.cpp        load_checkpoint, repairing chunks from copies
//   checkpoint_verify.cpp      inspect_checkpoint, verify_checkpoint, require_matching_model
#include <fmt/format.h>
#include <mpi.h>

#include <cstdint>
#include <exception>
#include <filesystem>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "core/error.hpp"
#include "core/types.hpp"
#include "io/checkpoint/checkpoint.hpp"
#include "io/checkpoint/checkpoint_fs.hpp"
#include "io/checkpoint/flat_range.hpp"
#include "io/checkpoint/h5.hpp"
#include "io/checkpoint/piece_cover.hpp"
#include "model/shard.hpp"

namespace exa::io::detail {

// ---- MPI helpers (checkpoint_mpi.cpp) -------------------------------------------

void bcast_string(std::string& s, int root, MPI_Comm comm);

// Every rank learns whether any rank failed; all then throw the message of
// the lowest failing rank.
void agree(MPI_Comm comm, const std::string& local_error);

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

// Sums the chunk partials of all ranks.
std::vector<std::uint64_t> allreduce_sum(const std::vector<std::uint64_t>& partial, MPI_Comm comm);

// ---- what goes where (checkpoint_items.cpp) -------------------------------------

// "[2, 3]"
std::string shape_str(const std::vector<std::int64_t>& s);

constexpr const char* kModelGroup = "/model";
constexpr const char* kOptimGroup = "/optim";
constexpr const char* kExpAvgGroup = "/optim/exp_avg";
constexpr const char* kExpAvgSqGroup = "/optim/exp_avg_sq";
constexpr const char* kStateGroup = "/state";
constexpr const char* kResidualGroup = "/optim/topk_residual";

// One dataset as this rank sees it; the shard's box is filled in.
struct Item {
  std::string group, name;  // "/model", "embed.weight"
  std::vector<std::int64_t> shape;
  model::Shard shard;
  View1<float> view;
  std::string path() const { return group + "/" + name; }
};

void validate(const std::vector<CheckpointTensor>& tensors, const OptimizerState* optim);
std::vector<Item> items_of(const std::vector<CheckpointTensor>& tensors, const OptimizerState* optim);

// Top-k's residual rows (OptimizerMoments::residual): one item per tensor
// with has_residual, of shape [holders, ...shape]. Save (`file_rows` null):
// this rank's box in its own row. Load: the tensors the file holds rows of
// (name -> its row count, the same on every rank), this rank's box over
// all of the file's rows. `holder` is this rank's index among the ranks
// holding the same box (-1: it holds none of the tensor), `holders` their
// number. Collective over comm (one allgather of box signatures).
struct ResidualItem {
  Item item;
  std::int64_t holder = -1, holders = 0;
  View1<float> residual;  // the caller's
};
std::vector<ResidualItem> residual_items(const std::vector<CheckpointTensor>& tensors, const OptimizerState& optim,
                                         MPI_Comm comm, const std::map<std::string, std::int64_t>* file_rows);

// A /state dataset: the whole array on every rank (replicas: rank 0 writes
// it, each rank reads all of it). The view is left empty (a load reads into
// host buffers).
Item state_item(const std::string& name, const std::vector<std::int64_t>& shape);

// Every rank must pass the same names, shapes and optimizer choice.
void check_same_everywhere(const std::vector<Item>& items, MPI_Comm comm);

// Every rank's piece of every item (box offset and extent, then the range
// in the box), and who writes what of each: covers[i]. Collective.
std::vector<PieceCover> gather_pieces(const std::vector<Item>& items, MPI_Comm comm);

// Where each item's chunk partials sit in one flat vector (so that one
// allreduce adds them all): offsets[i] .. offsets[i + 1].
std::vector<std::size_t> chunk_offsets(const std::vector<Item>& items, const std::vector<std::int64_t>& chunk_elems);

// ---- HDF5 selections (checkpoint_selections.cpp) --------------------------------

// Selects the union of ranges of a box's flattening in an N-d dataspace
// (none when empty). HDF5 lists a selection's elements in the dataspace's
// row-major order, which within one box is the box's own: the i-th element
// selected is the i-th of the ranges.
void select_ranges(hid_t space, const model::Box& box, const std::vector<FlatRange>& ranges);

// A 1-D memory dataspace of n elements selecting the given ranges (local indices).
h5::Id memory_space(std::int64_t n, const std::vector<FlatRange>& ranges);

// The ranges moved down by `by`: positions in a box's flattening as
// indices into a buffer that starts at position `by`.
std::vector<FlatRange> shifted(const std::vector<FlatRange>& r, std::int64_t by);

// MPI-IO file access (collective metadata), and the transfer of a dataset
// of `bytes` (its global size, so the same mode on every rank): collective
// (MPI-IO's two-phase I/O, which pays for large interleaved pieces) from
// kCollectiveTransferBytes up, independent below, where its rounds of
// collectives cost more than they gather. Measured on 4 ranks sharing 2
// cores, a checkpoint of 0.1 MiB of parameters took 3.6 s to write with
// every dataset collective and 0.29 s independent.
constexpr std::uint64_t kCollectiveTransferBytes = std::uint64_t(8) << 20;
h5::Id file_access(MPI_Comm comm);
h5::Id transfer_for(std::uint64_t bytes);
std::uint64_t dataset_bytes(const std::vector<std::int64_t>& shape);

// ---- meta (checkpoint_meta.cpp) -------------------------------------------------

constexpr const char* kChunkAttr = "chunk_checksums";

// The checksums [b, e) combined (chunks into their dataset's checksum).
std::uint64_t sum_of(const std::uint64_t* b, const std::uint64_t* e);

// The Merkle tree over every chunk: leaves "<path>#<k>" with the
// chunk's checksum, datasets by path, chunks by index.
std::uint64_t chunk_merkle_root(const std::vector<DatasetInfo>& ds);

// The attributes on "/" with their checksum (write_file adds the Merkle
// roots and chunk_elements).
void write_meta(hid_t root, const CheckpointMeta& m);

// Reads the format version first: a file from another program or version
// must fail on that, not on some later attribute.
CheckpointMeta read_meta(hid_t root, const std::string& file);

// Stored checksums of every dataset under /model and /optim (sorted by path)
// and a check that their Merkle root matches the one on "/".
std::vector<DatasetInfo> list_datasets(hid_t file);
void verify_merkle(const std::vector<DatasetInfo>& ds, const CheckpointMeta& meta, const std::string& file);

// Opens a checkpoint file read-only; exa::Error naming the file, its size
// and what to do when HDF5 cannot.
h5::Id open_file(const std::string& file, hid_t fapl);

// Runs f; an HDF5 failure inside (a damaged file) becomes a message naming the
// file and what to do.
template <class F>
void damaged_if_h5_fails(const std::string& file, F&& f) {
  try {
    f();
  } catch (const h5::Failure& e) {
    throw Error(fmt::format("checkpoint file {} is damaged ({}); {}", file, e.what(),
                            fs_detail::older_checkpoints_hint(std::filesystem::path(file).parent_path().string())));
  }
}

// ---- read checks (checkpoint_read.cpp) ------------------------------------------

// The datasets a model's tensors (and their moments) occupy: path and shape.
using Expected = std::vector<std::pair<std::string, std::vector<std::int64_t>>>;

// What every reader checks before any data is read: the file's datasets are
// exactly the model's (names and shapes), with optimizer state when wanted.
void check_datasets(const std::string& file, const Expected& expected, bool want_optim, bool has_optim,
                    const std::vector<DatasetInfo>& present);

// The chunk size a file's datasets are verified in: its own, or the whole
// dataset as one chunk (files written before chunk checksums).
std::int64_t verify_chunk(const CheckpointMeta& meta, const std::vector<std::int64_t>& shape);

// What chunk k of dataset d was written with.
std::uint64_t stored_chunk(const DatasetInfo& d, std::int64_t k);

}  // namespace exa::io::detail
