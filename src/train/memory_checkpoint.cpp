#include "train/memory_checkpoint.hpp"

#include <unistd.h>

#include <chrono>

#include "comm/mpi_env.hpp"
#include "core/log.hpp"
#include "core/profiling.hpp"

namespace exa::train {

MemoryCheckpoint::MemoryCheckpoint(const deck::Config& cfg, const comm::ProcessGrid& grid, MPI_Comm world,
                                   const std::vector<io::CheckpointTensor>& tensors)
    : world_(world),
      every_(cfg.get_int("checkpoint.memory_every")),
      job_(io::memory_job(cfg.get_string("checkpoint.memory_dir"), cfg.get_string("output.run_dir"), tensors)) {
  const int rank = comm_rank(world), size = comm_size(world);
  const int pretend = static_cast<int>(cfg.get_int("checkpoint.memory_ranks_per_node"));
  const int m = pretend > 0 ? pretend : grid.ranks_per_node();
  const int shift = size == 1 ? 0 : m < size ? m : 1;  // one node: the next rank at least
  buddy_ = (rank + shift) % size;
  int node = pretend > 0 ? rank / pretend : grid.coords().node;
  std::vector<int> nodes(static_cast<std::size_t>(size));
  MPI_Allgather(&node, 1, MPI_INT, nodes.data(), 1, MPI_INT, world);
  if (rank == 0) {
    const auto ms = std::chrono::duration_cast<std::chrono::milliseconds>(
                        std::chrono::system_clock::now().time_since_epoch())
                        .count();
    launch_ = (std::uint64_t(ms) << 16) ^ std::uint64_t(::getpid() & 0xffff);  // later launches sort later
  }
  MPI_Bcast(&launch_, 1, MPI_UINT64_T, 0, world);
  if (!enabled() || rank != 0) return;
  int same = 0;
  for (int r = 0; r < size; ++r) same += size > 1 && nodes[std::size_t(r)] == nodes[std::size_t((r + shift) % size)];
  log::info("checkpoint: tier 0 every {} steps in {} (shared memory), rank r's copy kept by rank (r + {}) mod {}",
            every_, job_.dir, shift, size);
  if (size == 1)
    log::warn("checkpoint: tier 0 on one rank keeps no buddy copy: a lost node loses the snapshot");
  else if (same > 0)
    log::warn("checkpoint: {} of {} ranks have their tier-0 buddy on their own node (ranks per node {}); set "
              "checkpoint.memory_ranks_per_node so that copies land on another node",
              same, size, m);
}

void MemoryCheckpoint::save(const std::vector<io::CheckpointTensor>& tensors, const io::OptimizerState& optim,
                            const io::CheckpointMeta& meta) {
  const double t0 = wall_seconds();
  const auto rep = io::save_memory_snapshot(job_, launch_, tensors, optim, meta, buddy_, world_);
  if (!rep.error.empty()) log::warn("checkpoint: {}", rep.error);
  if (rep.ok)
    log::info("checkpoint: tier 0 step {} in memory ({:.2f} MiB a rank, copy on rank {}) in {:.3f} s", meta.step,
              double(rep.bytes) / (1 << 20), buddy_, wall_seconds() - t0);
  else
    log::info("checkpoint: tier 0 step {} not complete on every rank; the previous snapshot stays", meta.step);
}

std::optional<std::uint64_t> MemoryCheckpoint::newest_step() const {
  if (!enabled()) return std::nullopt;
  const auto mine = io::newest_memory_step(job_);
  long long s = mine ? static_cast<long long>(*mine) : -1, hi = -1;
  MPI_Allreduce(&s, &hi, 1, MPI_LONG_LONG, MPI_MAX, world_);
  if (hi < 0) return std::nullopt;
  return static_cast<std::uint64_t>(hi);
}

std::optional<io::MemoryCandidate> MemoryCheckpoint::newest() {
  if (!enabled()) return std::nullopt;
  std::vector<std::string> notes;
  auto c = io::newest_memory_snapshot(job_, notes);
  for (const auto& n : notes) log::info("checkpoint: {}", n);
  // Every rank scanned the same files; should they disagree, none is used.
  long long mine[2] = {c ? (long long)c->step : -1, c ? (long long)c->launch : -1}, lo[2], hi[2];
  MPI_Allreduce(mine, lo, 2, MPI_LONG_LONG, MPI_MIN, world_);
  MPI_Allreduce(mine, hi, 2, MPI_LONG_LONG, MPI_MAX, world_);
  if (lo[0] != hi[0] || lo[1] != hi[1]) {
    log::info("checkpoint: tier 0: the ranks see different snapshots (steps {} to {}); not using tier 0", lo[0],
              hi[0]);
    return std::nullopt;
  }
  return c;
}

io::CheckpointMeta MemoryCheckpoint::load(const io::MemoryCandidate& c, const std::vector<io::CheckpointTensor>& tensors,
                                          const io::OptimizerState& optim) {
  std::vector<std::string> notes;
  try {
    auto meta = io::load_memory_snapshot(c, tensors, optim, world_, notes);
    for (const auto& n : notes) log::warn("checkpoint: {}", n);
    return meta;
  } catch (...) {
    for (const auto& n : notes) log::warn("checkpoint: {}", n);
    throw;
  }
}

void MemoryCheckpoint::remove_all(const char* why) {
  MPI_Barrier(world_);
  if (comm_rank(world_) == 0)
    if (const int n = io::remove_memory_snapshots(job_); n > 0)
      log::info("checkpoint: removed {} tier-0 segments of this run from {} ({})", n, job_.dir, why);
  MPI_Barrier(world_);
}

void MemoryCheckpoint::lose_held(int rank) { io::remove_memory_snapshots_held_by(job_, rank); }

}  // namespace exa::train
