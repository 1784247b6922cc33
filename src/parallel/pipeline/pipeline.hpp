#pragma once
// Pipeline: this rank's stage of pipeline parallelism (docs/architecture.md,
// "Pipeline parallelism"). It runs a step's micro-batches through the
// stage's StageModel in the order of a pipeline Schedule (schedules.hpp),
// with several activation contexts alive at once, and moves the boundary
// tensors over the grid's Pp group:
//
//   forward j   stage s-1 --[N,d] activation--> stage s       (tag 2j)
//   backward j  stage s   <--[N,d] its gradient-- stage s+1   (tag 2j+1)
//
// Interleaved (v = pipeline.virtual_stages chunks per stage), micro-batch
// j at chunk c is slot k = c*m + j, tags 2k and 2k+1 of the receiving
// slot, and the last stage's chunk c sends on to the first stage's chunk
// c+1 (its gradient comes back the same way).
//
// between the ranks of one Pp group: the same tp, cp and dp coordinates on
// neighbouring stages. N is the rank's rows of a micro-batch: micro_batch
// x seq_len / cp (its zigzag chunks), divided by tp under sequence
// parallelism (its block of the residual stream); without it every TP rank
// sends its own copy of the replicated [N,d].
//
// The messages travel on four channels per stage, one per direction and
// neighbour: activations in and out, gradients in and out, each a
// comm::Communicator over the two ranks of one pipeline edge (comm.backend:
// NCCL on CUDA builds, else MPI). So each channel carries one stream of
// messages, sent and received in the schedule's order. Every send and
// receive is nonblocking. On MPI the step posts all its receives before the
// first operation, into buffers of its own, so a transfer lands while the
// stage computes. On an ordered transport (NCCL: one stream, no tags) a
// receive queued early would hold back everything behind it, so each is
// posted right before the operation that needs it. Either way the only
// waits are for data a stage cannot go on without. Shapes are fixed by the
// deck (the rows above, d_model), so there is no shape handshake. The time
// spent in those waits is the stage's measured bubble.
//
// Under the zero-bubble schedule the stage's Linear seams defer their
// weight gradients into `weights` (deferred_weights.hpp): the step opens the
// queue around each backward but the last, runs the oldest deferred W while
// a receive is outstanding (instead of blocking), keeps at most
// stages - stage of them pending, and runs the rest before its last
// backward.
//
// Beyond the step: the sums over the stages (losses, norms), the tied
// embedding's gradient summed over the first and last stages (Megatron's
// embedding group), and a forward-only pass for evaluation.
#include <mpi.h>

#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/process_grid.hpp"
#include "core/reduction.hpp"
#include "model/activation_context.hpp"
#include "model/model_config.hpp"
#include "model/parameter_store.hpp"
#include "model/stage_model.hpp"
#include "model/weights.hpp"
#include "parallel/pipeline/deferred_weights.hpp"
#include "parallel/pipeline/pipeline_options.hpp"
#include "parallel/schedule.hpp"

namespace exa::parallel::pipeline {

// What one step of the stage measured.
struct PipelineStats {
  int peak_live = 0;     // most activation contexts alive at once
  double wait_s = 0;     // blocked on receives (and the last sends): the bubble
  double step_s = 0;     // the whole pass
  std::size_t peak_activation_bytes = 0;  // the model's context pool at its peak
  double bubble() const { return step_s > 0 ? wait_s / step_s : 0.0; }
  // Another round of the same step (or the first, into a default one):
  // times add up, peaks are the larger.
  void add_round(const PipelineStats& r);
};

class Pipeline {
 public:
  using Model = model::StageModel<float>;
  using Ctx = model::StageContext<float>;
  using W = model::Weights<float, Device>;

  // `weights`: the queue the model's DeferredLinear seams fill (zb only).
  Pipeline(const comm::ProcessGrid& grid, const model::ModelConfig& cfg, PipelineOptions opt,
           model::MicroBatchShape shape, std::shared_ptr<WeightGradQueue> weights = nullptr);
  ~Pipeline();
  Pipeline(const Pipeline&) = delete;
  Pipeline& operator=(const Pipeline&) = delete;

  int stage() const { return stage_; }
  int stages() const { return stages_; }
  bool first() const { return stage_ == 0; }
  bool last() const { return stage_ == stages_ - 1; }
  const Schedule& schedule() const { return *schedule_; }
  int chunks() const { return opt_.virtual_stages; }
  const PipelineOptions& options() const { return opt_; }
  // Micro-batches per round of a step of n_micro (options().round, or all
  // of them); a round runs through run() as a whole pipeline pass.
  int round_size(int n_micro) const { return opt_.round > 0 && opt_.round < n_micro ? opt_.round : n_micro; }

  struct Step {
    Model& model;
    const W& weights;
    const W& grads;
    double backward_seed = 1;
    // Tokens and targets of micro-batch j (only the end stages ask, unless
    // input_everywhere: packed documents, which every stage reads).
    std::function<Model::Input(int j)> input;
    // After micro-batch j's forward on this stage (may be empty).
    std::function<void(int j, const Ctx& c)> forwarded;
    // Before micro-batch j's backward; last: no backward follows (may be empty).
    std::function<void(int j, bool last)> before_backward;
    // Micro-batch j's shape (this rank's rows, as the model takes it) when
    // micro-batches differ (token budgets); empty: the pipeline's own.
    std::function<model::MicroBatchShape(int j)> shape;
    bool input_everywhere = false;
  };
  // One round of n_micro micro-batches in the schedule's order (a step of
  // several rounds calls it once a round, passing `last` to
  // before_backward only in its final round).
  PipelineStats run(const Step& step, int n_micro);
  // Forward only (evaluation): each micro-batch through every stage; on the
  // last stage `done(j, c)` sees its context before it is released.
  void forward_only(const Step& step, int n_micro, const std::function<void(int j, const Ctx& c)>& done);

  // In place, the sum over the stages (collective over the Pp group).
  void sum(double* x, int n) const;
  double max(double x) const;
  // Tied embeddings: embed.weight's gradient in `store` summed over the
  // first and last stages. The pair shares its tp and dp coordinates, and
  // both stages cut the table's unit alike (it is unit 0 on both, alone
  // with its adapters), so under ZeRO each holds the same part of it and
  // the parts are summed; exa::Error when the parts differ. A no-op
  // elsewhere and when untied.
  void sum_tied_grads(const model::ParameterStore& store) const;
  // The gradient norm's reduction over the whole model: `within` (the
  // stage's data-parallel reduction, empty: none) then the sum over the
  // stages, counting the tied embedding once; `parts` sums the last
  // stage's copy over the Data group when ZeRO shards it (empty: whole).
  Reduction norm_reduction(Reduction within, const model::ParameterStore& store, Reduction parts = {}) const;

  MPI_Comm pp_comm() const { return pp_; }
  // The stages' point-to-point transport: "mpi", "nccl" or "ordered".
  const char* transport() const;

 private:
  // One channel of a pipeline edge: its communicator and the neighbour's rank in it.
  struct Link {
    std::unique_ptr<comm::Communicator> comm;
    int peer = 0;
  };
  void make_links();
  void post_receives(const Model& m, int n_micro, const std::function<model::MicroBatchShape(int)>& shape = {});
  model::MicroBatchShape shape_of(const Step& s, int j) const { return s.shape ? s.shape(j) : shape_; }
  // Chunk c's input comes from another (stage, chunk), not the embedding;
  // its output goes on, not into the head. Interleaved, the last stage's
  // chunk c feeds the first stage's chunk c + 1 (over the wrap edge).
  bool has_prev(int c) const { return stage_ > 0 || c > 0; }
  bool has_next(int c) const { return stage_ < stages_ - 1 || c < chunks() - 1; }
  int prev_chunk(int c) const { return stage_ > 0 ? c : c - 1; }
  int next_chunk(int c) const { return stage_ < stages_ - 1 ? c : c + 1; }
  // Waits for r; deferred W fills the wait unless it runs at fixed points.
  void wait(comm::Request& r, double& waited);
  // Slot k's receives, and a send of x on a channel (tags: 2k forward, 2k+1 backward).
  comm::Request receive_activation(int k);
  comm::Request receive_gradient(int k);
  static comm::Request send(const Link& to, const Model::V2& x, int tag);

  model::ModelConfig cfg_;
  PipelineOptions opt_;
  model::MicroBatchShape shape_;
  int stage_ = 0, stages_ = 1;
  MPI_Comm pp_ = MPI_COMM_NULL;      // the grid's Pp group (not owned)
  MPI_Comm tp_ = MPI_COMM_NULL;      // the grid's Tp group (not owned): this stage's tensor-parallel ranks
  MPI_Comm embed_ = MPI_COMM_NULL;   // first and last stage, tied embeddings (owned)
  // Activations from the previous stage and to the next; gradients from
  // the next and to the previous.
  Link acts_in_, acts_out_, grads_in_, grads_out_;
  bool lazy_ = false;  // ordered channels: post each receive when it is needed
  std::unique_ptr<Schedule> schedule_;
  std::shared_ptr<WeightGradQueue> deferred_;  // zb: the stage's deferred weight gradients
  // Per micro-batch: the activation received, the gradient received, the
  // gradient sent back; and the requests in flight.
  std::vector<Model::V2> act_in_, grad_in_, grad_out_;
  std::vector<comm::Request> act_recv_, grad_recv_, act_send_, grad_send_;
};

}  // namespace exa::parallel::pipeline
