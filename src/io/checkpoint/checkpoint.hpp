#pragma once
// HDF5 checkpoints (docs/architecture.md "Checkpoints", a contract; the file format is
// docs/checkpoint-format.md).
//
//   <ckpt>/step_00000100/state.h5     one complete checkpoint
//   <ckpt>/latest -> step_00000100    symlink to the newest complete one
//   <ckpt>/.step_00000200.tmp-4242/   a save in progress (or one a crash cut short)
//
// <ckpt> is normally <run>/ckpt (deck: output.run_dir, checkpoint.dir).
//
// Every tensor is one fp32 dataset under its global name with its global
// shape (/model/<name>, /optim/exp_avg/<name>, /optim/exp_avg_sq/<name>;
// replicated training state that is not a tensor under /state/<name>);
// each rank writes and reads its Shard (model/shard.hpp: a box of the
// tensor, from tensor or expert parallelism, and a contiguous range of the
// box's row-major elements, from ZeRO) as hyperslabs, with collective MPI-IO
// transfers. So any layout reads any checkpoint, and the file loads into
// PyTorch as is.
//
// All functions taking an MPI_Comm are collective over it: every rank of the
// communicator calls them with the same tensor names and shapes, each with
// its own shard (shards of the same box may overlap: each element is written
// once, by the lowest rank holding it; different boxes must be disjoint; on
// save the shards must cover every element). The
// metadata written is rank 0's. Every failure throws exa::Error on every
// rank of the communicator with the same message (problem and fix); a
// failed save leaves the earlier checkpoints as they were.
#include <mpi.h>

#include <cstdint>
#include <functional>
#include <map>
#include <string>
#include <vector>

#include "core/types.hpp"
#include "io/checkpoint/flat_range.hpp"
#include "model/parameter_specs.hpp"
#include "model/parameter_store.hpp"

namespace exa::io {

inline constexpr std::int64_t kCheckpointFormatVersion = 1;
// Elements per checksum chunk of the files this ExaMoE writes (256 KiB of fp32).
inline constexpr std::int64_t kDefaultChunkElements = std::int64_t(1) << 16;
inline constexpr const char* kCheckpointFile = "state.h5";
inline constexpr const char* kLatestLink = "latest";

// The parallel layout that wrote a checkpoint (informational: any layout can
// read any checkpoint). Stored as the JSON string attribute "layout".
struct CheckpointLayout {
  std::int64_t world_size = 1, pp = 1, dp = 1, cp = 1, tp = 1, ep = 1, zero = 0;
  std::string to_json() const;
  static CheckpointLayout from_json(const std::string& json);  // exa::Error when malformed
  bool operator==(const CheckpointLayout& o) const;
};

// A small replicated fp32 array of training state that is not a model
// tensor (e.g. the routing bias of aux-loss-free balancing), stored as the
// dataset /state/<name>.
struct StateArray {
  std::vector<std::int64_t> shape;
  std::vector<float> values;  // row-major, the product of shape values
};

// Everything besides tensors that a restart needs; the caller fills it on
// save and gets it back on load. Stored as attributes on "/", except
// `state`.
struct CheckpointMeta {
  std::uint64_t step = 0;                // optimizer steps completed
  std::uint64_t tokens_seen = 0;         // training tokens consumed
  std::uint64_t data_cursor = 0;         // the sampler's position
  std::vector<std::uint64_t> rng_state;  // any generator state the caller keeps (may be empty)
  // LR schedule state (step-based), e.g. {"lr": 3e-3, "warmup_steps": 30, ...}:
  // stored as double attributes "lr_schedule.<key>".
  std::map<std::string, double> lr_schedule;
  std::string deck;         // deck::Config::deck_text(), verbatim
  std::string config_json;  // deck::Config::to_json(), the resolved configuration
  CheckpointLayout layout;
  // /state/<name> datasets (rank 0's values are written, like the rest of
  // the metadata); a load returns every one the file holds, inspect only
  // growth_history (expert growth's events).
  std::map<std::string, StateArray> state;

  // Filled by load/inspect, ignored by save.
  std::int64_t format_version = kCheckpointFormatVersion;
  std::uint64_t merkle_root = 0;  // over every dataset's checksum, sorted by path
  // Per-chunk checksums (docs/checkpoint-format.md): elements per chunk and
  // the Merkle root over every chunk; 0 in files written before them.
  std::int64_t chunk_elements = 0;
  std::uint64_t chunk_merkle_root = 0;
  std::string created_by;               // "ExaMoE <version> (<git hash>)"
  bool has_optimizer = false;     // the file holds /optim
  std::string directory;          // the step directory that was read
};

// One tensor as this rank sees it: global name and shape, the owned piece
// (a shard without a box is of the whole tensor), and that piece's values in
// the box's row-major order (shard.count elements, any memory space). The
// optional moments have the same shard.
struct CheckpointTensor {
  std::string name;
  std::vector<std::int64_t> shape;
  model::Shard shard;
  View1<float> value;
};

// AdamW moments by global tensor name, each View holding the same Shard as
// the tensor's value.
//
// Top-k's error feedback (comm.compression = "topk"), when `has_residual`
// (the same on every rank for a tensor): `residual` is what this rank still
// owes of the tensor's gradient over its whole box (empty where the rank
// holds none of it). The ranks holding the same box (data-parallel
// replicas, and tensor-parallel ones of a replicated tensor) owe apart, so
// the file keeps a row per holder: /optim/topk_residual/<name> of shape
// [holders, ...shape], holder k's values in row k (holders numbered in
// world-rank order). A load into the same layout gives each rank its own
// row back; into another, holder j of a box gets the sum of the rows k with
// k mod holders == j (the caller rescales by the data-parallel sizes'
// ratio, docs/checkpoint-format.md). A file without the rows loads zeros.
struct OptimizerMoments {
  View1<float> exp_avg, exp_avg_sq;
  bool has_residual = false;
  View1<float> residual;
};
using OptimizerState = std::map<std::string, OptimizerMoments>;

// The tensors of a ParameterStore (its Views alias the store's values, so a
// load fills the store).
std::vector<CheckpointTensor> checkpoint_tensors(const model::ParameterStore& params);

// ---- save -------------------------------------------------------------------

struct SaveOptions {
  // Newest complete checkpoints kept; older ones are deleted once the new one
  // is complete and `latest` points at it. 0 keeps all.
  int keep = 3;
  // Also delete leftover ".step_*.tmp-*" directories (saves cut short by a
  // crash) after a successful save.
  bool remove_stale_temps = true;
  // Elements per checksum chunk (the unit a load verifies and names).
  std::int64_t chunk_elements = kDefaultChunkElements;
  // The save runs on a background thread (train/async_checkpoint.hpp): no
  // Kokkos kernels (checksums in plain loops), so every View must be
  // host-accessible.
  bool background = false;
  // Called on every rank after the file is written and closed, before it is
  // renamed into place and `latest` moves (fault injection in tests).
  std::function<void()> before_publish;
};

// Writes <ckpt_dir>/step_<meta.step>/ (replacing an existing one for the same
// step), points `latest` at it and applies retention. `optim` may be null
// (no /optim group). Returns the new step directory.
std::string save_checkpoint(const std::string& ckpt_dir, const std::vector<CheckpointTensor>& tensors,
                            const OptimizerState* optim, const CheckpointMeta& meta, MPI_Comm comm,
                            const SaveOptions& options = {});
std::string save_checkpoint(const std::string& ckpt_dir, const model::ParameterStore& params,
                            const OptimizerState* optim, const CheckpointMeta& meta, MPI_Comm comm,
                            const SaveOptions& options = {});

// ---- load -------------------------------------------------------------------

// The step directory `path` names: a step directory itself (holds state.h5),
// a checkpoint directory (its `latest`, or when `latest` is missing or
// dangling, the newest step_* directory) or a run directory holding ckpt/.
// exa::Error listing what the directory holds when it has no complete
// checkpoint. Rank-local (no MPI).
std::string resolve_checkpoint(const std::string& path);

// Complete checkpoints in a checkpoint directory, oldest first (step, path).
std::vector<std::pair<std::uint64_t, std::string>> list_checkpoints(const std::string& ckpt_dir);

// Reads the checkpoint `path` names (see resolve_checkpoint) into the given
// tensors' Views (each rank its shard). Verifies the format version, that the
// file's /model holds exactly these tensors with these global shapes, and
// every checksum (data read back against each dataset's attribute, and the
// Merkle root). `optim` null loads /model only (eval, generate).
//
// Repair (docs/checkpoint-format.md "Repair"): `options.copies` names other
// copies of the same checkpoint (step directories, e.g. another storage
// tier's). A chunk that fails verification is read from the first copy that
// holds the same checkpoint (equal step and chunk Merkle root) and whose
// chunk verifies against the checksum the damaged file stored; rank 0 logs
// the dataset, the chunk and the copy. A file that cannot be repaired chunk
// by chunk (damaged metadata, a chunk damaged in every copy) is replaced by
// the first copy that loads, with a log line. What no copy repairs throws
// the error naming the file and the dataset; nothing is loaded and no file
// is written.
struct LoadOptions {
  std::vector<std::string> copies;
};
CheckpointMeta load_checkpoint(const std::string& path, const std::vector<CheckpointTensor>& tensors,
                               const OptimizerState* optim, MPI_Comm comm, const LoadOptions& options = {});
CheckpointMeta load_checkpoint(const std::string& path, model::ParameterStore& params, const OptimizerState* optim,
                               MPI_Comm comm, const LoadOptions& options = {});

// ---- inspect ----------------------------------------------------------------

struct DatasetInfo {
  std::string path;  // "/model/embed.weight"
  std::vector<std::int64_t> shape;
  std::uint64_t checksum = 0;  // the stored attribute
  std::vector<std::uint64_t> chunk_checksums;  // the stored per-chunk attribute (empty in files written before chunks)
};
struct CheckpointInfo {
  CheckpointMeta meta;
  std::vector<DatasetInfo> datasets;  // sorted by path
};
// Metadata and dataset list of a checkpoint without reading tensor data;
// rank-local (opens the file with the serial driver). Checks the format
// version and the Merkle root against the stored dataset checksums.
CheckpointInfo inspect_checkpoint(const std::string& path);

// The offline check of `examoe-ckpt verify`: inspect_checkpoint's checks,
// then every dataset read back chunk by chunk and checksummed. Rank-local
// (serial driver). exa::Error when the metadata or the Merkle roots do not
// hold (nothing else can be trusted then); data that does not match its
// checksums is listed in the result.
struct ChunkMismatch {
  std::string path;        // "/model/embed.weight"
  std::int64_t chunk = 0;  // chunk index (0 for the whole dataset of a file without chunks)
  FlatRange elements;      // the chunk's elements in the global row-major order
  std::uint64_t stored = 0, computed = 0;
};
struct VerifyResult {
  CheckpointInfo info;
  std::string file;
  std::int64_t chunks_checked = 0;
  std::vector<ChunkMismatch> mismatches;
  bool ok() const { return mismatches.empty(); }
};
VerifyResult verify_checkpoint(const std::string& path);

// Checks, without reading tensor data, what load_checkpoint checks first: the
// checkpoint `info` describes holds exactly the tensors `specs` names, with
// their global shapes, and (`want_optim`) optimizer state for each. The same
// exa::Error as load_checkpoint otherwise ("written for a different model").
// Rank-local; `examoe --check` uses it before a resumed run is queued.
void require_matching_model(const CheckpointInfo& info, const std::vector<model::ParamSpec>& specs,
                            bool want_optim);

// "step_00000100"
std::string checkpoint_dir_name(std::uint64_t step);

}  // namespace exa::io
