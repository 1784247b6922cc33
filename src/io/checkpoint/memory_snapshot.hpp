#pragma once
// Tier-0 checkpoints: memory snapshots with a buddy copy (Gemini-style;
// docs/architecture.md "Checkpoints").
//
// Every rank writes the state it owns (its piece of every tensor with its
// global box, the AdamW moments of the same piece, and the CheckpointMeta a
// normal checkpoint stores) as one segment in `dir`, and sends the same bytes
// to its buddy rank, which writes them as a second segment. `dir` is POSIX
// shared memory (/dev/shm): node memory that outlives the MPI job, so that a
// relaunch on the survivors finds it. Segment names:
//
//   <dir>/examoe-t0-<job>-s<step, 8 digits>-g<launch, 16 hex>-o<owner>-h<holder>
//
// (<job> a hash of the run directory, <launch> a random id per job launch,
// <owner> the rank whose state it is, <holder> the rank that keeps it;
// owner == holder is the rank's own copy). Each is written under a temporary
// name and renamed. A segment holds a header (JSON, guarded by an XXH64) and
// the pieces' values, each array with its own XXH64.
//
// A load, in any layout, takes the newest step whose segments (one per
// owner: its own copy, else a buddy's) verify, belong to this job and model,
// and cover every tensor; each rank assembles its pieces from the stored
// ones (piece_copy.hpp) and checks every array it reads, trying the other
// copies of a piece that fails. Here every rank reads the segments directly:
// one machine, one /dev/shm. On a cluster a node's segments would be read by
// its own ranks and served to the others over MPI (not built).
#include <mpi.h>

#include <cstdint>
#include <optional>
#include <string>
#include <vector>

#include "io/checkpoint/checkpoint.hpp"

namespace exa::io {

// Whose snapshots: a job (the run directory) and a model (its tensors'
// names and global shapes). Segments of another job are not looked at; a
// segment of this job but another model is refused with a log line.
struct MemoryJob {
  std::string dir;      // where segments live (checkpoint.memory_dir)
  std::string run_dir;  // the run directory they belong to (stored in every header)
  std::string key;      // memory_job_key(run_dir)
  std::uint64_t model = 0;  // memory_model_fingerprint(tensors)
  std::vector<std::pair<std::string, std::vector<std::int64_t>>> tensors;  // names and global shapes
};
std::string memory_job_key(const std::string& run_dir);
std::uint64_t memory_model_fingerprint(const std::vector<CheckpointTensor>& tensors);
MemoryJob memory_job(const std::string& dir, const std::string& run_dir, const std::vector<CheckpointTensor>& tensors);

struct MemorySaveReport {
  bool ok = false;         // every rank wrote both segments
  std::string error;       // this rank's failure, when it had one
  std::uint64_t bytes = 0;  // this rank's segment
};

// Collective over comm: writes this rank's segment, sends it to rank
// `buddy` and writes the one received from the rank whose buddy this rank
// is (buddy must be a permutation: rank r sends to buddy(r), receives from
// buddy^-1(r)). `launch` is the same on every rank. When every rank
// succeeded, the job's segments of older steps are removed (by rank 0: one
// /dev/shm). A failure (e.g. shared memory full) is reported, not thrown:
// the older snapshot then stays.
MemorySaveReport save_memory_snapshot(const MemoryJob& job, std::uint64_t launch,
                                      const std::vector<CheckpointTensor>& tensors, const OptimizerState& optim,
                                      const CheckpointMeta& meta, int buddy, MPI_Comm comm);

// The newest step of the job whose segments verify and cover every tensor,
// rank-local (every rank finds the same): step, and for each owner the
// segment files that hold it, its own copy first. `notes` gets log lines
// (segments refused, owners only a buddy holds).
struct MemoryCandidate {
  std::uint64_t step = 0, launch = 0;
  int world = 0;                                // the world that wrote it
  std::vector<std::vector<std::string>> files;  // files[owner]: holders' segments, own first
};
std::optional<MemoryCandidate> newest_memory_snapshot(const MemoryJob& job, std::vector<std::string>& notes);

// The newest step of which this rank sees a segment of the job, of any
// model, unverified; rank-local. (Expert growth: the model to build before
// newest_memory_snapshot can match it.)
std::optional<std::uint64_t> newest_memory_step(const MemoryJob& job);

// Collective: fills the tensors and moments (each rank its own pieces, any
// layout) from `c`, verifying every array read; a piece whose array fails is
// read from the owner's next copy (a note). Throws exa::Error on every rank,
// naming the owner, tensor and files, when some rank could not fill every
// element from verified data; nothing is written into the Views then.
CheckpointMeta load_memory_snapshot(const MemoryCandidate& c, const std::vector<CheckpointTensor>& tensors,
                                    const OptimizerState& optim, MPI_Comm comm, std::vector<std::string>& notes);

// Removes the job's segments (all of them, or those of steps below
// `before`); rank-local. Returns how many.
int remove_memory_snapshots(const MemoryJob& job, std::optional<std::uint64_t> before = std::nullopt);
// The job's segments that `holder` keeps (fault injection: a node's memory
// lost with it).
int remove_memory_snapshots_held_by(const MemoryJob& job, int holder);

}  // namespace exa::io
