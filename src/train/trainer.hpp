#pragma once
// The Trainer: the step loop around one model replica.
//
// A step takes train.grad_accum micro-batches of train.micro_batch sequences
// on each data-parallel rank (global batch = micro_batch * grad_accum * dp,
// the same samples whatever the layout), accumulates their gradients,
// averages them over the data-parallel group, clips by the global norm and
// applies AdamW at the scheduled learning rate. Around that: evaluation on
// the held-out split every train.eval_every steps, a log line and a
// metrics.jsonl record every train.log_every steps, and a checkpoint every
// checkpoint.every steps and at the end. checkpoint.resume continues from
// the run's latest checkpoint, repeating the uninterrupted run's losses.
#include <mpi.h>

#include <array>
#include <map>
#include <memory>
#include <optional>
#include <string>

#include "comm/process_grid.hpp"
#include "comm/traffic_ledger.hpp"
#include "comm/watchdog.hpp"
#include "core/deck/config.hpp"
#include "io/stream_mixture.hpp"
#include "io/metrics_writer.hpp"
#include "io/sampler.hpp"
#include "model/parameter_store.hpp"
#include "model/stage_model.hpp"
#include "optim/loss_scaler.hpp"
#include "optim/optimizer.hpp"
#include "parallel/data/data_parallel.hpp"
#include "parallel/layout.hpp"
#include "parallel/step_executor.hpp"
#include "train/grad_projection.hpp"
#include "train/aux_free.hpp"
#include "train/checkpoint_manager.hpp"
#include "train/distillation.hpp"
#include "train/device_batch.hpp"
#include "train/energy.hpp"
#include "train/expert_growth.hpp"
#include "train/expert_replacement.hpp"
#include "train/federated.hpp"
#include "train/flops.hpp"
#include "parallel/expert/moe_load.hpp"
#include "train/nan_policy.hpp"
#include "train/memory_cap.hpp"
#include "train/replica_check.hpp"
#include "train/step_log.hpp"
#include "train/stop_signal.hpp"

namespace exa::train {

struct StepResult {
  double loss = 0, ce = 0, aux = 0, z = 0, distill = 0;  // means over the step's micro-batches and ranks
  double teacher_s = 0;  // the distillation teacher's forward (growth.distill_steps), this rank
  double imbalance = 1;                     // worst MoE layer, max over micro-batches
  parallel::expert::MoeLoad moe;            // expert loads, summed over the micro-batches and ranks
  optim::StepReport report;
  std::vector<nlohmann::json> replaced;     // expert re-placements after the step (ExpertReplacement)
  NanGuard::Action nan_action = NanGuard::Action::none;  // resilience.nan_policy's verdict on the step
  bool overflow = false;  // skipped by dynamic loss scaling (optim/loss_scaler.hpp), not a non-finite step
  // The global batch: rows computed (padding included), tokens that are
  // not padding, and targets in the loss.
  double rows = 0, tokens = 0, targets = 0;
  // Per task (data stream): the cross-entropy summed over its valid targets
  // and their count, over every rank ([2 * tasks]).
  std::vector<double> task_sums;
  // train.grad_projection: projections made, and the task gradients'
  // pairwise cosines (i < j, row by row).
  int projection_conflicts = 0;
  std::vector<double> projection_cosines;
};

// The steps one log line or one metrics record sums up. The two have their
// own cadences (train.log_every, output.metrics_every), so each keeps its
// own sums and where the phase clocks stood when it began.
struct LogInterval {
  StepResult sum;  // losses summed, the worst imbalance, the last step's report and loads
  std::optional<double> val;
  std::int64_t steps = 0;
  std::int64_t distill_steps = 0;  // steps that ran a distillation teacher
  double t0 = 0;
  std::map<std::string, double> phases0;  // phase_timers() at the start
  double eval_comm0 = 0;                  // Trainer's eval communication at the start
  std::array<comm::TrafficBytes, comm::kTrafficKinds> traffic0{};  // the bytes ledger at the start

  void begin(double eval_comm);
  void add(const StepResult& r);
  double phase(const char* prefix) const;  // seconds in phases named prefix* since begin()
};

class Trainer {
 public:
  Trainer(const deck::Config& cfg, MPI_Comm world);
  Trainer(const Trainer&) = delete;
  Trainer& operator=(const Trainer&) = delete;

  // Runs from the current step to train.steps; returns the final validation
  // loss (NaN when there is no validation split). A stop signal (StopSignal)
  // ends it early, after a log line and a checkpoint: see stopped_by().
  double run();
  // The signal that ended run() early, 0 when it ran to train.steps.
  int stopped_by() const { return stop_.signal(); }

  // One optimizer step (exposed for tests): step index `step` (0-based).
  StepResult train_step(std::int64_t step);
  // Mean cross-entropy over train.eval_batches validation batches.
  double evaluate();
  // Writes a checkpoint of the state after `steps_done` steps.
  std::string save(std::int64_t steps_done);
  // Loads `path` (a step directory, a run's ckpt/ directory or its `latest`),
  // repairing damaged chunks from `copies` (the same step in other tiers).
  void load(const std::string& path, const std::vector<std::string>& copies = {});

  // Federated training (train/federated.hpp): `hook(steps_done)` runs after
  // every step's update, before that step's evaluation, log and checkpoint;
  // it returns false to end the run there (the checkpoint is written). With
  // a hook, the hook agrees on a scheduler's stop signal (agree_stop, over
  // whatever ranks it steps with), not the Trainer after each step: it ends
  // the run as stopped when agree_stop said so, complete otherwise.
  void set_step_hook(std::function<bool(std::int64_t)> hook) { step_hook_ = std::move(hook); }
  bool agree_stop(MPI_Comm comm) { return stop_.agreed(comm); }
  // This rank's part of the trainable masters, to be replaced in place;
  // then masters_replaced() brings the working copies up to date.
  model::ParameterStore::Flat trainable_values();
  void masters_replaced();
  io::MetricsWriter& metrics() { return *metrics_; }

  std::int64_t step() const { return step_; }
  const model::ParameterStore& store() const { return dp_->store(); }
  const parallel::data::DataParallel& data_parallel() const { return *dp_; }
  const model::ModelConfig& model_config() const { return mcfg_; }
  std::string run_dir() const { return run_dir_; }
  std::string checkpoint_dir() const;

 private:
  // Summarises `iv` (ending at the current step) as a log line when `line`
  // and as a metrics.jsonl record when `record`.
  void log_interval(const LogInterval& iv, bool line, bool record);
  void inject_fault(std::int64_t steps_done) const;
  // memory.offload_experts: the tiers' peak resident bytes, at the end.
  void log_offload() const;
  void move_experts(const parallel::expert::ExpertMove& move);  // ExpertReplacement's mover
  // Makes what depends on the model's shape from layout_ and mcfg_:
  // parameters (initialised as at step 0), model, step executor, optimizer,
  // re-placement and balancing state. Used at construction, by a resume of
  // another expert count and by growth.
  // `only`: the tensors to initialise (all when empty; growth fills the
  // rest from the model before it).
  void build_state(const std::function<bool(const std::string&)>& only = {});
  // The model of `experts` experts per MoE layer, as at step 0 (resume).
  void rebuild(std::int64_t experts);
  // Expert growth after `steps_done` steps: the grown model takes the
  // state of the current one in the running job (docs/architecture.md
  // "Expert growth").
  void grow(std::int64_t steps_done);
  void apply_clone_rings();  // growth_'s clone families to the model's routers
  // Distillation after the growth event at `steps_done`
  // (growth.distill_steps): the teacher, filled, routes as `before` says
  // and is written beside the checkpoints.
  void publish_teacher(const io::CheckpointMeta& before, std::int64_t steps_done);
  // After a load: the teacher of the window the resumed step is in, from
  // its snapshot; none outside a window.
  void restore_teacher();
  // resilience.nan_policy = "rollback": reload the newest checkpoint before
  // the bad step `bad_step` (1-based).
  void rollback(std::int64_t bad_step);
  // The AdamW moments by tensor name (Views aliasing the optimizer's).
  io::OptimizerState optimizer_moments();
  io::CheckpointMeta checkpoint_meta(std::int64_t steps_done);  // what a checkpoint holds besides tensors
  void restore(const io::CheckpointMeta& meta);  // the Trainer's state after a load of any tier
  double eval_comm_s_ = 0;  // exposed communication inside evaluate(), since the run began

  const deck::Config& cfg_;
  MPI_Comm world_;
  std::unique_ptr<parallel::ParallelLayout> layout_;  // the deck's [parallel] layout over world_
  const comm::ProcessGrid& grid_ = layout_->grid();  // the same for every model expert growth makes
  std::string run_dir_;
  // Liveness (resilience.timeout_s): declared before dp_ so that a rank
  // failing mid-pass still has bounded waits while dp_ drains its requests.
  comm::WatchdogScope watchdog_;
  model::ModelConfig mcfg_;  // moe.n_experts: the current count (expert growth)
  ExpertGrowth growth_;      // [growth]
  DistillOptions distill_ = DistillOptions::from_deck(cfg_);  // growth.distill_*
  std::unique_ptr<Teacher> teacher_;  // the model before the last growth event, inside its window
  AuxFreeBalancing balance_{cfg_, mcfg_};  // moe.router_bias = "aux_free"
  ExpertReplacement replace_{cfg_, mcfg_, int(grid_.sizes().ep)};  // moe.replace_every (before model_: it reads it)
  std::unique_ptr<parallel::data::DataParallel> dp_;  // owns the parameters (ZeRO parts and working copies)
  std::unique_ptr<model::StageModel<float>> model_;  // parallel::build_model's choice for layout_
  // Runs a step's micro-batches and finishes their gradients, whatever the layout.
  std::unique_ptr<parallel::StepExecutor> exec_;
  std::unique_ptr<optim::Optimizer> opt_;
  io::StreamMixture data_;  // the deck's data streams (one without [[data.streams]])
  GradProjection projection_;  // train.grad_projection (after data_: it sets the streams' task order)
  std::vector<double> val_tasks_;
  // Tokens per byte of the validation text (0: unknown), for bits per byte.
  double val_tokens_per_byte_ = 0;  // the last evaluation per task: ce sum, targets ([2 * tasks])
  std::unique_ptr<io::MetricsWriter> metrics_;
  FlopCount flops_;
  double peak_gflops_ = 0;
  int peak_cores_ = 1;  // the cores peak_gflops_ counts (core/thread_check.hpp, compute_cores)
  std::int64_t step_ = 0, steps_ = 0, micro_batch_ = 0, grad_accum_ = 0, global_batch_ = 0;
  std::int64_t tokens_seen_ = 0;
  std::uint64_t base_root_ = 0;  // train.init_from's Merkle root (0: none)
  DeviceBatch batch_;
  EnergyMeter energy_;  // output.power_w_per_rank / RAPL: J/token in the log, kWh at the end
  StopSignal stop_;
  NanGuard nan_{cfg_};  // resilience.nan_check / nan_policy
  optim::LossScaler scaler_ = optim::LossScaler::from_deck(cfg_);  // precision.loss_scaling
  ReplicaCheck replica_{cfg_, grid_, layout_->options().data.zero};  // resilience.replica_check_every
  MemoryCap cap_{cfg_, world_};  // memory.cap_gb
  std::unique_ptr<CheckpointManager> ckpt_;  // tiers 0, 1 and 2, the async writer, resume and rollback
  std::function<bool(std::int64_t)> step_hook_;  // set_step_hook
  FederatedOptions federated_ = FederatedOptions::from_deck(cfg_);  // [federated]: whether this is one site of several
};

}  // namespace exa::train
