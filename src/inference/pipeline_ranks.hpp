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
#include "model/transformer.hpp"

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
  // The stages' transport: MPI until use_transport() picks the training
  // run's comm.backend (comm::make_transport; collective over the
  // replica's pipeline). transport() is its backend() name.
  void use_transport(comm::Backend backend);
  const char* transport() const { return p2p_->backend(); }

  // One batch through this stage, the protocol evaluation and generation
  // share. input(): `tokens` on the first stage; elsewhere the previous
  // stage's output [shape.N(), d], received (blocking) into `hidden`.
  // forward_and_send(): an inner stage's layers on `x`, the output sent
  // (blocking) to the next stage; the head stage runs its own last step
  // (eval or next_logits) instead.
  using Input = model::StageModel<float>::Input;
  Input input(const model::StageModel<float>::Tokens& tokens, const View2<float>& hidden,
              model::MicroBatchShape shape) const;
  void forward_and_send(model::Transformer<float>& m, const model::Weights<float, Device>& w, const Input& x) const;

 private:
  int stage_ = 0, stages_ = 1, replica_ = 0, replicas_ = 1;
  MPI_Comm pipe_ = MPI_COMM_NULL;
  std::unique_ptr<comm::Communicator> p2p_;
};

}  // namespace exa::inference
