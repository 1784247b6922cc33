#pragma once
// The ranks of an inference pipeline (`examoe eval --pp P`,
// `examoe-generate --pp P`; docs/architecture.md, "Pipeline parallelism"):
// ranks [s*R, (s+1)*R) hold stage s of P (R = ranks / P), as training orders
// pp slowest, and the ranks of one replica r (rank % R = r) form a pipeline.
// Each stage loads only its layers (CheckpointModel's stage constructor);
// the boundary tensor [rows, d] goes from stage to stage.
#include <mpi.h>

#include <memory>

#include "comm/communicator.hpp"
#include "core/types.hpp"

namespace exa::inference {

class PipelineRanks {
 public:
  // Collective over `comm`. exa::Error naming the fix unless pp >= 1
  // divides the ranks.
  PipelineRanks(MPI_Comm comm, int pp);
  ~PipelineRanks();
  PipelineRanks(const PipelineRanks&) = delete;
  PipelineRanks& operator=(const PipelineRanks&) = delete;

  int stage() const { return stage_; }
  int stages() const { return stages_; }
  int replica() const { return replica_; }
  int replicas() const { return replicas_; }
  bool first() const { return stage_ == 0; }
  bool last() const { return stage_ == stages_ - 1; }
  // The replica's pipeline: rank = stage.
  MPI_Comm comm() const { return pipe_; }

  // Blocking: x to the next stage; x (already sized) from the previous.
  void send_next(const View2<float>& x) const;
  void recv_prev(const View2<float>& x) const;

 private:
  int stage_ = 0, stages_ = 1, replica_ = 0, replicas_ = 1;
  MPI_Comm pipe_ = MPI_COMM_NULL;
  std::unique_ptr<comm::Communicator> p2p_;
};

}  // namespace exa::inference
