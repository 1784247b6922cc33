#include "train/async_checkpoint.hpp"

#include <chrono>
#include <cstdlib>
#include <cstring>

#include "comm/mpi_env.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/profiling.hpp"

namespace exa::train {

namespace {

// The same View with fresh storage (kept when the extent already fits).
void copy_into(View1<float>& dst, const View1<float>& src, const char* label) {
  if (dst.extent(0) != src.extent(0)) {
    dst = View1<float>(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), src.extent(0));
  }
  Kokkos::deep_copy(dst, src);
}

}  // namespace

AsyncCheckpointer::AsyncCheckpointer(MPI_Comm world, Policy policy) : world_(world), policy_(policy) {
  int level = MPI_THREAD_SINGLE;
  MPI_Query_thread(&level);
  EXA_REQUIRE(level == MPI_THREAD_MULTIPLE,
              "checkpoint.async = true needs MPI_THREAD_MULTIPLE (the writer thread runs collective MPI-IO while "
              "training runs its own collectives), but this MPI ({}) provides thread level {}: set "
              "checkpoint.async = false or use an MPI built with thread support",
              mpi_library_version(), level);
  MPI_Comm_dup(world, &writer_comm_);
}

AsyncCheckpointer::~AsyncCheckpointer() {
  if (writer_.joinable()) writer_.join();
  if (!error_.empty()) log::error("checkpoint: the last async write failed: {}", error_);
  if (writer_comm_ != MPI_COMM_NULL) MPI_Comm_free(&writer_comm_);
}

void AsyncCheckpointer::join_and_rethrow() {
  if (writer_.joinable()) writer_.join();
  if (!error_.empty()) {
    const std::string e = std::exchange(error_, std::string());
    throw Error(e);
  }
}

void AsyncCheckpointer::wait() {
  const double t0 = wall_seconds();
  const bool was_busy = !done_.load();
  join_and_rethrow();
  if (was_busy) log::info("checkpoint: waited {:.3f} s for the async write in flight", wall_seconds() - t0);
}

void AsyncCheckpointer::prepare(const std::vector<io::CheckpointTensor>& tensors, const io::OptimizerState& optim) {
  EXA_REQUIRE(done_.load(), "checkpoint: the snapshot cannot change while its write is in flight");
  // A memcpy on host backends (a device-to-device copy on a GPU build, which
  // a background save then refuses).
  snap_.resize(tensors.size());
  for (std::size_t i = 0; i < tensors.size(); ++i) {
    const auto& t = tensors[i];
    snap_[i].name = t.name;
    snap_[i].shape = t.shape;
    snap_[i].shard = t.shard;
    copy_into(snap_[i].value, t.value, "exa::ckpt::snapshot");
    const auto it = optim.find(t.name);
    if (it == optim.end()) continue;  // frozen: no moments
    auto& m = snap_optim_[t.name];
    copy_into(m.exp_avg, it->second.exp_avg, "exa::ckpt::snapshot_m");
    copy_into(m.exp_avg_sq, it->second.exp_avg_sq, "exa::ckpt::snapshot_v");
    m.has_residual = it->second.has_residual;
    if (m.has_residual) copy_into(m.residual, it->second.residual, "exa::ckpt::snapshot_residual");
  }
  Kokkos::fence();
}

bool AsyncCheckpointer::start(const std::string& ckpt_dir, const std::vector<io::CheckpointTensor>& tensors,
                              const io::OptimizerState& optim, const io::CheckpointMeta& meta,
                              io::SaveOptions options, bool must_write) {
  const double t0 = wall_seconds();
  // Every rank takes the same decision: busy if the write is in flight anywhere.
  int busy = done_.load() ? 0 : 1, any = 0;
  MPI_Allreduce(&busy, &any, 1, MPI_INT, MPI_MAX, world_);
  if (any != 0 && policy_ == Policy::skip && !must_write) {
    log::warn("checkpoint: step {} skipped: the async write of the previous one is still in flight "
              "(checkpoint.async_policy = \"skip\")",
              meta.step);
    return false;
  }
  join_and_rethrow();  // policy wait (or already done)
  const double waited = wall_seconds() - t0;

  prepare(tensors, optim);
  const double stall = wall_seconds() - t0;

  options.background = true;
  // Fault injection (tests): EXAMOE_FAULT_EXIT_IN_ASYNC_WRITE=N ends the
  // process from the writer after step N's file is written, before it is
  // renamed into place: a crash mid-write.
  static const char* crash = std::getenv("EXAMOE_FAULT_EXIT_IN_ASYNC_WRITE");
  if (crash != nullptr && std::strtoull(crash, nullptr, 10) == meta.step) {
    options.before_publish = [step = meta.step] {
      log::warn("EXAMOE_FAULT_EXIT_IN_ASYNC_WRITE={}: exiting in the middle of the async write (fault injection)",
                step);
      std::_Exit(86);
    };
  }
  // EXAMOE_FAULT_ASYNC_WRITE_DELAY_S=T: the writer sleeps T s first (a slow
  // file system), so that the next checkpoint finds it in flight.
  static const char* delay = std::getenv("EXAMOE_FAULT_ASYNC_WRITE_DELAY_S");
  const double sleep_s = delay != nullptr ? std::atof(delay) : 0.0;
  done_ = false;
  writer_ = std::thread([this, ckpt_dir, meta, options, stall, waited, sleep_s] {
    if (sleep_s > 0) std::this_thread::sleep_for(std::chrono::duration<double>(sleep_s));
    const double w0 = wall_seconds();
    try {
      const std::string dir = io::save_checkpoint(ckpt_dir, snap_, &snap_optim_, meta, writer_comm_, options);
      const double w = wall_seconds() - w0;
      log::info("checkpoint: wrote {} in the background in {:.3f} s; training stalled {:.4f} s for it ({:.1f}% of "
                "the write; {:.4f} s of that waiting for the previous write)",
                dir, w, stall, w > 0 ? 100.0 * stall / w : 0.0, waited);
    } catch (const std::exception& e) {
      error_ = e.what();
    }
    done_ = true;
  });
  return true;
}

}  // namespace exa::train
