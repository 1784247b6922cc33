#pragma once
// DataParallel: data parallelism over the grid's Data group with ZeRO
// stages 0-3 (parallel/data/zero_engine.hpp), bucketed gradient reduction
// overlapped with the backward pass, flat or hierarchical collectives, and
// the expert-data group of expert parallelism.
//
// It owns the parameters: the master ParameterStore (this rank's part for
// zero >= 1, its whole boxes for zero = 0; the optimizer and the checkpoint
// work on it) and the working copies the model reads and writes, bound as
// model::Weights of this rank's StagePlan. It is the model's UnitHooks, and
// the step executor (parallel/step_executor.hpp) and the trainer drive it
// around each step:
//
//   dp.begin_step();                                   // zero the gradients
//   for (j = 0; j < M; ++j) {
//     dp.set_sync(j == M - 1);                         // zero 0/1: reduce on the last micro-batch only
//     model.forward(dp.weights(), ...); model.backward(dp.weights(), dp.grads(), seed);
//   }
//   dp.finish_gradients();                             // store().grads() = dp-mean of this rank's part
//   opt.step(dp.store(), step);                        // clip (norm_reduction) + AdamW on the part
//   dp.params_updated();                               // refresh the working copies
//
// Expert parallelism (ep > 1): this rank holds E/ep experts of each MoE
// layer; their tensors reduce over the ExpertData group (dp*cp/ep replicas)
// and ZeRO shards them over it, by a second engine; everything else reduces
// and shards over the Data group. The store then holds the Data-group
// tensors first and the expert tensors after them, each engine's run
// contiguous. Both engines divide by the data-parallel size: an expert's
// gradient already sums the tokens of the ep ranks that routed to it.
// That size is the Data group's dp·cp: under context parallelism each rank's
// loss is the mean over its rows of the micro-batch (the same number on
// every rank), so the mean over the cp ranks is the micro-batch's loss and
// 1/(dp·cp) of the sum is the single-rank gradient.
#include <cstdint>
#include <functional>
#include <memory>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/process_grid.hpp"
#include "core/reduction.hpp"
#include "core/types.hpp"
#include "model/expert_offload.hpp"
#include "model/model_config.hpp"
#include "parallel/layout.hpp"
#include "model/parameter_store.hpp"
#include "model/stage_plan.hpp"
#include "model/unit_hooks.hpp"
#include "model/weights.hpp"
#include "parallel/data/data_parallel_options.hpp"
#include "parallel/tensor/replicated_grads.hpp"
#include "parallel/data/zero_engine.hpp"
#include "parallel/pipeline/deferred_weights.hpp"
#include "parallel/pipeline/gradient_home.hpp"

namespace exa::parallel::data {

// Bytes on this rank, by the engine's own accounting.
struct DataParallelMemory {
  double params = 0;   // master values (+ the whole working replica for zero 1/2)
  double grads = 0;    // master gradients (+ the whole working gradient for zero 1)
  double buffers = 0;  // unit buffers (zero 2/3 gathered parameters and unit gradients), receive/staging
  // The routed experts' share of params and grads (their master parts and
  // working copies; zero 2/3 unit buffers are counted in buffers).
  double expert_params = 0, expert_grads = 0;
  double expert_master = 0;  // the experts' master elements * 4 bytes (AdamW keeps two more of these)
};

// The tensors of each ZeRO engine, in the store's order: the Data group's,
// and, when the plan holds a part of the experts (ep > 1), the routed
// experts', which reduce over the ExpertData group; under LoRA the trainable
// adapters' engines come first and the frozen model's after them (empty
// groups left out). Pure: the planner sizes the engines' buffers from it
// without building them.
struct EngineSpecs {
  std::vector<model::ParamSpec> specs;
  bool experts = false;  // the routed experts under expert parallelism (the ExpertData group)
  bool frozen = false;   // LoRA's frozen model: gathered, never reduced or updated
};
std::vector<EngineSpecs> engine_groups(const model::ModelConfig& mcfg, const model::StagePlan& plan);
std::vector<std::vector<model::ParamSpec>> engine_specs(const model::ModelConfig& mcfg, const model::StagePlan& plan);

class DataParallel final : public model::UnitHooks, public pipeline::GradientHome {
 public:
  using Flat = View1<float>;

  // The parameters of layout.plan(), reduced and sharded as
  // layout.options().data says.
  explicit DataParallel(const ParallelLayout& layout);
  ~DataParallel() override;
  DataParallel(const DataParallel&) = delete;
  DataParallel& operator=(const DataParallel&) = delete;

  int size() const { return data_size_; }
  int rank() const { return data_rank_; }
  const DataParallelOptions& options() const { return opt_; }
  const model::StagePlan& plan() const { return plan_; }
  bool expert_parallel() const { return expert_engine_ != nullptr; }
  std::int64_t model_numel() const { return model_numel_; }  // the whole model's parameters

  model::ParameterStore& store() { return store_; }
  const model::ParameterStore& store() const { return store_; }
  const model::Weights<float, Device>& weights() const { return w_; }
  const model::Weights<float, Device>& grads() const { return g_; }

  // Philox init of the master parts, then params_updated().
  void initialize(std::uint64_t seed, const std::function<bool(const std::string&)>& only = {});
  // The master values changed (init, checkpoint load, optimizer step): bring
  // the working copies up to date (zero 1/2 allgather; zero 3 drops what it
  // has gathered).
  void params_updated();
  // A per-rank quantity of the Data-group tensors' parts (a squared norm)
  // summed over the Data group when ZeRO shards them (zero > 0); the
  // identity when every rank holds them whole.
  Reduction part_sum();
  // The optimizer step changed the trainable master values: the same for
  // their engines only (LoRA's frozen model never changes, and its working
  // copies are not gathered again).
  void params_stepped();

  // The values of store() tensor i that every rank of the tensor's group
  // (Data, or ExpertData for the routed experts) holds too, for the replica
  // check (train/replica_check.hpp): the master box under zero 0, the whole
  // working copy under zero 1/2 (its allgather after the step waited for).
  // An empty View under zero 3, where no rank holds a whole copy.
  Flat replica_values(std::size_t i);

  // Top-k's error feedback (comm.compression = "topk", parallel/data/
  // zero_engine.hpp): whether tensor `name` has a residual (trainable, and
  // its group has more than one rank: the same on every rank), and this
  // rank's residual of its box (empty where it holds none).
  bool has_residual(const std::string& name) const;
  Flat residual(const std::string& name) const;
  // Every residual times `s` (0: forgotten), e.g. after a step that was not
  // finite, or a checkpoint written at another data-parallel size.
  void scale_residuals(float s);

  void begin_step();
  void set_sync(bool sync);
  // The step about to run (comm.stochastic_rounding keys its draws by it,
  // so a resumed run draws the same).
  void set_step(std::int64_t step);
  // Every reduction of the step done: store().grads() holds the mean over
  // the data-parallel ranks of this rank's part of the gradient (with tensor
  // parallelism, the replicated tensors' parts then summed over Tp), for
  // its first store().trainable_numel() elements.
  void finish_gradients();
  // Sum over the ranks whose parts make up the model once (GradClipper).
  Reduction norm_reduction();

  // The grid's Data group (dp x cp ranks): the ranks whose sums make a
  // step's totals.
  MPI_Comm data_comm() const { return data_comm_; }
  double sum(double x) { return data_engine_->group().sum(x); }
  std::int64_t sum(std::int64_t x) { return data_engine_->group().sum(x); }

  DataParallelMemory memory() const;

  // memory.offload_experts: the offload hook (null without), and every
  // offloaded page out of the resident set, after something swept the
  // whole store (a checkpoint, a load, an expert move).
  const model::ExpertOffload* offload() const { return offload_.get(); }
  void release_offloaded();

  // model::UnitHooks
  void before_forward(int unit) override;
  void experts_routed(int unit, const std::vector<std::uint8_t>& used) override;
  void after_forward(int unit, const std::vector<std::uint8_t>& experts_used) override;
  void before_backward(int unit) override;
  void before_recompute(int unit) override;
  void after_backward(int unit) override;

  // pipeline::GradientHome: under zero 2/3 with the zb schedule, the
  // deferred weight gradients' buffers (owner: the engine's index).
  Place locate(const float* grad) const override;
  float* open_deferred(int owner, int unit) override;
  void close_deferred(int owner, int unit) override;

 private:
  DataParallel(const comm::ProcessGrid& grid, const model::ModelConfig& mcfg, const model::StagePlan& plan,
               DataParallelOptions opt);
  ZeroEngine& engine_of(const std::string& name) const;
  Reduction data_norm_reduction();  // over the data-parallel layout only

  // What the engines are built from: the store's tensors in its order and
  // this rank's piece of each, and per engine its group, layout and first
  // element in the store (moved into the engines once the store exists).
  struct EngineSetup {
    DataGroup group;
    ShardLayout layout;
    std::int64_t base;
    bool experts, frozen;
  };
  struct Split {
    std::vector<model::ParamSpec> specs;
    std::vector<model::Shard> shards;
    std::vector<EngineSetup> engines;
  };
  // memory.offload_experts: the rank's offload file and what goes there.
  static model::ParameterStore::Offload offload_of(const DataParallelOptions& opt);
  static Split split(const comm::ProcessGrid& grid, const model::ModelConfig& mcfg, const model::StagePlan& plan,
                     const DataParallelOptions& opt);

  DataParallelOptions opt_;
  MPI_Comm data_comm_ = MPI_COMM_NULL;  // the grid's (not owned)
  model::ModelConfig mcfg_;
  model::StagePlan plan_;
  int data_size_ = 1, data_rank_ = 0;
  std::int64_t model_numel_ = 0;
  Split split_;
  model::ParameterStore store_;
  std::int64_t expert_base_ = 0;                     // the trainable expert tensors' first element in the store
  std::vector<std::unique_ptr<ZeroEngine>> engines_;  // in the store's order (engine_groups)
  ZeroEngine* data_engine_ = nullptr;                 // the trainable Data-group tensors' (the first)
  ZeroEngine* expert_engine_ = nullptr;               // the trainable routed experts' (ep > 1)
  std::unique_ptr<comm::Communicator> ep_sum_;        // zero 0 with experts: their norm sums over Ep
  std::unique_ptr<tensor::ReplicatedGradients> tp_grads_;     // tp > 1: the replicated tensors' reduction over Tp
  model::Weights<float, Device> w_, g_;
  std::unique_ptr<model::ExpertOffload> offload_;
  std::shared_ptr<pipeline::WeightGradQueue> deferred_;  // the layout's queue, when this is its home
};

}  // namespace exa::parallel::data
