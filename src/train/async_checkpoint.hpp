#pragma once
// Asynchronous checkpoints (checkpoint.async = true): at a checkpoint step
// each rank copies its parameters and optimizer moments into a snapshot
// (the stall training sees), and a background thread writes the snapshot
// with io::save_checkpoint while training goes on.
//
// * The writer's collective MPI-IO runs on its own duplicate of the world
//   communicator, so it never interleaves with training collectives; that
//   needs MPI_THREAD_MULTIPLE (refused with a message otherwise).
// * HDF5 here is not thread-safe (Debian's parallel build has no thread-safe
//   mode): while a write is in flight only the writer calls HDF5. The
//   Trainer waits for it before any other HDF5 call (a rollback's load, the
//   end of the run); training itself reads no HDF5 (an HDF5 corpus is read
//   whole at start).
// * The writer launches no Kokkos kernels (SaveOptions::background), so the
//   snapshot must be host-accessible: host backends only for now.
// * At most one write is in flight: the next checkpoint waits for it
//   (policy "wait") or is skipped with a log line ("skip"); all ranks agree.
// * `latest` moves only after a complete write (io::save_checkpoint's
//   rename), so a crash mid-write leaves the previous checkpoint as latest.
#include <mpi.h>

#include <atomic>
#include <string>
#include <thread>
#include <vector>

#include "io/checkpoint/checkpoint.hpp"

namespace exa::train {

class AsyncCheckpointer {
 public:
  enum class Policy { wait, skip };
  // Collective over `world` (duplicates it for the writer).
  AsyncCheckpointer(MPI_Comm world, Policy policy);
  ~AsyncCheckpointer();  // waits for a write in flight (an error is logged)
  AsyncCheckpointer(const AsyncCheckpointer&) = delete;
  AsyncCheckpointer& operator=(const AsyncCheckpointer&) = delete;

  // Collective over the world: snapshots the tensors and moments (their
  // Views are copied; the caller may change them as soon as this returns)
  // and starts writing them to `ckpt_dir`. Returns false when the
  // checkpoint was skipped (policy skip, a write still in flight on some
  // rank; never when `must_write`: the last checkpoint of a run). Rethrows
  // the error of a previous write that failed.
  bool start(const std::string& ckpt_dir, const std::vector<io::CheckpointTensor>& tensors,
             const io::OptimizerState& optim, const io::CheckpointMeta& meta, io::SaveOptions options,
             bool must_write);
  // Waits for the write in flight, if any; rethrows its error. Collective.
  void wait();
  // Allocates (and touches) the snapshot for these tensors ahead of the
  // first checkpoint, so that its stall is a copy, not page faults.
  void prepare(const std::vector<io::CheckpointTensor>& tensors, const io::OptimizerState& optim);

 private:
  void join_and_rethrow();

  MPI_Comm world_, writer_comm_ = MPI_COMM_NULL;
  Policy policy_;
  std::thread writer_;
  std::atomic<bool> done_{true};
  std::string error_;
  // The snapshot: kept between checkpoints (only one write is in flight).
  std::vector<io::CheckpointTensor> snap_;
  io::OptimizerState snap_optim_;
};

}  // namespace exa::train
