#include "train/trainer.hpp"

#include "train/init_from.hpp"
#include "model/seams/lora_ops.hpp"

#include <algorithm>
#include <chrono>
#include <cmath>
#include <csignal>
#include <cstdlib>
#include <filesystem>
#include <limits>
#include <thread>

#include <fmt/ranges.h>

#include "comm/communicator.hpp"
#include "comm/mpi_env.hpp"
#include "comm/node_threads.hpp"
#include "comm/watchdog.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/memory.hpp"
#include "model/precision.hpp"
#include "core/memory_ledger.hpp"
#include "core/profiling.hpp"
#include "core/trace.hpp"
#include "io/checkpoint/checkpoint.hpp"
#include "io/dataset.hpp"
#include "model/weights.hpp"
#include "parallel/build_model.hpp"
#include "train/deck_dataset.hpp"
#include "train/deck_paths.hpp"
#include "train/sgemm_peak.hpp"
#include "train/supported_layout.hpp"

namespace exa::train {

namespace {

// Who chose the layout: the deck, or the planner (examoe's parallel.auto).
std::string layout_chosen_by(const deck::Config& cfg) {
  const auto& cluster = cfg.get_string("parallel.cluster");
  return cfg.get_bool("parallel.auto") ? "parallel.auto on " + cluster : std::string("the deck");
}

}  // namespace

namespace fs = std::filesystem;

namespace {

double phase_total(const char* prefix) {
  double t = 0;
  for (const auto& [name, s] : phase_timers().all())
    if (name.rfind(prefix, 0) == 0) t += s;
  return t;
}

}  // namespace

Trainer::Trainer(const deck::Config& cfg, MPI_Comm world)
    : cfg_(cfg),
      world_(world),
      // The layout check runs first, so an unsupported layout gets its own
      // message before any communicator is built.
      layout_([&] {
        require_supported_layout(cfg, true);
        model::use_deck_precision(cfg);
        return std::make_unique<parallel::ParallelLayout>(parallel::ParallelLayout::from_deck(cfg, world));
      }()),
      run_dir_(cfg.get_string("output.run_dir")),
      watchdog_(world,
                [&] {
                  // The run directory holds the heartbeats: make it first.
                  if (comm_rank(world) == 0) fs::create_directories(run_dir_);
                  MPI_Barrier(world);
                  return (fs::path(run_dir_) / ".heartbeat").string();
                }(),
                cfg.get_float("resilience.timeout_s")),
      mcfg_(model::ModelConfig::from_deck(cfg)),
      growth_(model::GrowthSchedule::from_deck(cfg), mcfg_),
      data_(open_deck_streams(cfg)),
      projection_(cfg, data_),
      // RAPL counts the machine's packages: the ranks on this host share them,
      // whatever node size parallel.ranks_per_node pretends.
      energy_(EnergyOptions::from_deck(cfg), world) {
  steps_ = cfg.get_int("train.steps");
  val_tokens_per_byte_ = validation_tokens_per_byte(cfg, data_);
  // Token budgets size the training micro-batches themselves; evaluation
  // keeps train.micro_batch windows of seq_len per micro-batch.
  micro_batch_ = cfg.get_int("train.micro_batch");
  grad_accum_ = cfg.get_int("train.grad_accum");
  // The cp ranks of a Cp group share their sequences (each holds its share
  // of their rows): the global batch counts the dp replicas only.
  global_batch_ = micro_batch_ * grad_accum_ * grid_.sizes().dp;
  build_state();
  if (const auto what = exec_->describe(int(grad_accum_)); !what.empty()) log::info("{}", what);
  batch_ = DeviceBatch(micro_batch_, mcfg_.seq_len, {grid_.sizes().cp, grid_.coords().cp});
  if (growth_.enabled()) {
    const auto& g = growth_.schedule();
    log::info("growth: every {} steps +{} experts per MoE layer up to {} ({}, noise {:g}){}", g.every, g.add, g.max,
              model::to_string(g.init), g.noise,
              g.init == model::GrowthInit::split && !mcfg_.norm_topk
                  ? "; moe.norm_topk = false: a clone's softmax term changes the gates, so growth does not keep "
                    "the model's function"
                  : "");
  }

  // One writer: the tensor-parallel ranks of data rank 0 log the same step,
  // and every stage's reports the same (summed) losses.
  metrics_ = std::make_unique<io::MetricsWriter>((fs::path(run_dir_) / "metrics.jsonl").string(),
                                                 dp_->rank() == 0 && grid_.coords().tp == 0 && grid_.coords().pp == 0);
  metrics_->write(nlohmann::json{{"event", "start"}, {"world_size", comm_size(world)},
                                 {"layout", {{"dp", grid_.sizes().dp}, {"cp", grid_.sizes().cp},
                                             {"ep", grid_.sizes().ep}, {"tp", grid_.sizes().tp},
                                             {"pp", grid_.sizes().pp},
                                             {"zero", dp_->options().zero}, {"experts_here",
                                              dp_->plan().local_experts()},
                                             // The bulk traffic of tp, ep, pp and cp.
                                             {"transport",
                                              comm::transport_name(comm::backend_named(cfg.get_string("comm.backend")))},
                                             // Who chose it: the deck, or the planner (examoe's
                                             // parallel.auto) for this cluster.
                                             {"chosen_by", layout_chosen_by(cfg)}}},
                                 {"precision", {{"matmuls", kernels::to_string(kernels::matmul_precision())}}},
                                 {"config", nlohmann::json::parse(cfg.to_json())}});

  ckpt_ = std::make_unique<CheckpointManager>(
      cfg, grid_, world_, dp_->store(),
      CheckpointSource{[this](std::int64_t steps_done) { return checkpoint_meta(steps_done); },
                       [this] { return optimizer_moments(); },
                       [this](const std::function<void()>& write) {
                         replace_.in_global_order([&](const parallel::expert::ExpertMove& m) { move_experts(m); }, write);
                       },
                       [this](const io::CheckpointMeta& meta) { restore(meta); },
                       growth_.enabled() ? std::function<void(std::uint64_t)>([this](std::uint64_t step) {
                         rebuild(growth_.schedule().experts_after(std::int64_t(step)));
                       })
                                         : std::function<void(std::uint64_t)>()});
  if (const auto& from = cfg.get_string("train.init_from"); from != "none") {
    base_root_ = load_init_from(from, dp_->store(), mcfg_, world_);
    dp_->params_updated();
  } else if (mcfg_.lora.enabled()) {
    log::warn("lora: adapters on the seeded initialisation (train.init_from = \"none\"); fine-tuning starts "
              "from a trained model: set train.init_from to its checkpoint");
  }
  ckpt_->resume();
  if (comm_rank(world) == 0) {
    const auto freeze = cfg.get_int("optim.freeze_variance_step"), warmup = cfg.get_int("comm.topk_warmup"),
               lr_warmup = cfg.get_int("optim.warmup_steps");
    if (cfg.get_string("comm.compression") == "topk" && dp_->size() > 1) {
      if (freeze == 0)
        log::warn("comm.compression = \"topk\" with AdamW's second moment live: a gradient that error feedback "
                  "delays moves its weight less than on time, and the loss lags; set comm.topk_warmup and "
                  "optim.freeze_variance_step to the same dense warm-up (docs/parallel.md, \"Top-k\")");
      else if (freeze > warmup)
        log::warn("optim.freeze_variance_step = {} is after comm.topk_warmup = {}: the frozen second moment holds "
                  "top-k's sparse gradients; set them equal (docs/parallel.md, \"Top-k\")", freeze, warmup);
    }
    if (freeze > 0 && freeze <= lr_warmup)
      log::warn("optim.freeze_variance_step = {} is within the learning-rate warm-up (optim.warmup_steps = {}), "
                "while gradients are still large: the frozen second moment then divides every later step by "
                "too much; freeze well after it (docs/parallel.md, \"Top-k\")", freeze, lr_warmup);
  }
  // One thread pool per rank: say what oversubscribes, and count MFU
  // against the cores this rank computes on (core/thread_check.hpp).
  const ThreadSetup threads = comm::probe_node_threads(world);
  if (comm_rank(world) == 0)
    for (const auto& w : thread_warnings(threads)) log::warn("examoe: {}", w);
  peak_cores_ = compute_cores(threads);
  peak_gflops_ = measure_sgemm_gflops() * peak_scale(threads);
  ckpt_->start_async_writer();
}

std::string Trainer::checkpoint_dir() const { return deck_checkpoint_dir(cfg_); }

StepResult Trainer::train_step(std::int64_t step) {
  StepResult r;
  const double scale_before = scaler_.scale();
  opt_->set_loss_scale(scale_before);
  const auto& acc = opt_->accumulation();
  // Packed sequences and token-budget micro-batches hold different numbers
  // of valid targets: each micro-batch's cross-entropy is its sum over the
  // step's mean share of them, so the step's loss is the mean over every
  // valid target of the global batch in any layout
  // (StageModel::Input::ce_denominator). Every rank counts the whole
  // global batch (a pure function of the step).
  const io::Sampler& first = data_.stream(0).sampler;  // every stream samples the same way
  const bool counted = first.budget() || first.packed();
  const std::int64_t n_micro = grad_accum_ * grid_.sizes().dp;
  for (std::int64_t m = 0; m < n_micro; ++m) {
    const io::BatchCounts c = data_.counts(step, m, micro_batch_);
    r.rows += double(c.cells());
    r.tokens += double(c.tokens);
    r.targets += double(c.targets);
  }
  const double ce_denominator = counted ? r.targets / (double(grad_accum_) * dp_->size()) : 0.0;
  // This data rank's micro-batches of the step's dp x grad_accum.
  const std::int64_t first_micro = grid_.coords().dp * grad_accum_;
  parallel::StepWork work{[&](int j) {
                            const std::int64_t m = first_micro + j;
                            auto in = batch_.load(data_.micro(step, m, micro_batch_));
                            in.ce_denominator = ce_denominator;
                            in.task = int(data_.task_of(data_.stream_of(step, m)));
                            return in;
                          },
                          acc.backward_seed()};
  work.tasks = int(data_.tasks().size());
  work.documents = first.packed();
  if (first.budget()) {
    const int cp = grid_.sizes().cp;
    work.shape = [&, cp](int j) {
      const io::BatchCounts c = data_.counts(step, first_micro + j, micro_batch_);
      return model::MicroBatchShape{c.sequences, c.rows / cp};
    };
  }
  if (mcfg_.lora.dropout > 0)  // LoRA's dropout masks: a function of (seed, step, data rank)
    model_->set_dropout_key(model::lora::key(model::lora::key(std::uint64_t(cfg_.get_int("train.seed")) + 1,
                                                              std::uint64_t(step)),
                                             std::uint64_t(grid_.coords().dp)));
  dp_->set_step(step);  // stochastic rounding's draws
  if (teacher_ && !teacher_->covers(step)) {
    log::info("distillation: the window of the growth after step {} has ended; teacher dropped",
              teacher_->event_step());
    teacher_.reset();
  }
  if (teacher_) {
    // The teacher first, on the same micro-batches; the student's head
    // then reads its soft targets.
    teacher_->run(work.input, int(grad_accum_), work.shape, work.documents);
    r.teacher_s = teacher_->last_seconds();
    work.input = [this, base = work.input](int j) {
      auto in = base(j);
      teacher_->attach(in, j);
      return in;
    };
  }
  parallel::StepTotals t;
  if (!projection_.enabled()) {
    t = exec_->run(work, int(grad_accum_));
    exec_->finalize_grads();
  } else {
    // One round per task: this rank's micro-batches j = k, k + K, ... are
    // task k's (m = first_micro + j, and K divides grad_accum), each
    // round's gradient reduced and kept; then their projected combination.
    const int K = projection_.tasks();
    const auto sq_norm = [&] {
      const double norm = opt_->clipper().compute(dp_->store()).norm;
      return norm * norm;
    };
    for (int k = 0; k < K; ++k) {
      parallel::StepWork round = work;
      round.input = [&work, k, K](int j) { return work.input(k + j * K); };
      if (work.shape) round.shape = [&work, k, K](int j) { return work.shape(k + j * K); };
      const auto tk = exec_->run(round, int(grad_accum_) / K);
      exec_->finalize_grads();
      projection_.keep(k, dp_->store(), sq_norm);
      t.merge(tk);
    }
    ScopedRegion region("compute/grad_projection", true);
    const auto rep = projection_.combine(step, dp_->store(), sq_norm);
    r.projection_conflicts = rep.conflicts;
    r.projection_cosines = rep.cosines;
  }
  r.imbalance = t.imbalance;
  const double n = double(grad_accum_) * dp_->size();
  r.loss = dp_->sum(nan_.inject(step + 1, comm_rank(world_), t.loss)) / n;
  r.ce = dp_->sum(t.ce) / n;
  r.aux = dp_->sum(t.aux) / n;
  r.z = dp_->sum(t.z) / n;
  r.distill = teacher_ ? dp_->sum(t.distill) / n : 0.0;
  r.task_sums = t.task_sums;
  for (double& x : r.task_sums) x = dp_->sum(x);
  r.moe = t.moe;
  if (std::isfinite(r.loss) || !nan_.enabled()) {
    ScopedRegion region("compute/optimizer", true);
    r.report = opt_->step(dp_->store(), step);
  } else {
    // A non-finite loss (the same on every rank) never reaches the optimizer.
    r.report.step = step;
    r.report.lr = opt_->schedule()(step);
    r.report.clip.norm = std::numeric_limits<double>::quiet_NaN();
    r.report.clip.finite = false;
  }
  // A finite loss with a non-finite gradient under dynamic loss scaling is
  // an fp16 overflow: the scaler halves S and the step is skipped without
  // reaching resilience.nan_policy (the norm is reduced, so every rank
  // agrees). At S = 1 the scaler declines, and the policy decides.
  if (std::isfinite(r.loss) && !r.report.applied) r.overflow = scaler_.after_step(false);
  else if (r.report.applied) scaler_.after_step(true);
  // Top-k's residuals hold this step's unsent gradient in the loss scale's
  // units: a step that was not applied may have left inf or NaN in them,
  // so they are forgotten; a new scale rescales them.
  if (!r.report.applied) dp_->scale_residuals(0.0f);
  else if (scaler_.scale() != scale_before) dp_->scale_residuals(float(scaler_.scale() / scale_before));
  if (r.report.applied) dp_->params_stepped();
  balance_.after_step(r.moe, r.report.applied, *model_);
  if (r.report.applied) growth_.after_step(r.moe);
  if (r.report.applied)
    r.replaced = replace_.after_step(r.moe, step + 1, [&](const parallel::expert::ExpertMove& m) { move_experts(m); });
  if (r.overflow) {
    log::info("step {}: gradient overflow at loss scale {:g}; skipped, scale now {:g}", step + 1,
              2 * scaler_.scale(), scaler_.scale());
  } else {
    if (!r.report.finite() && nan_.enabled() && nan_.policy() == NanGuard::Policy::abort && std::isfinite(r.loss))
      optim::require_finite(r.report.clip, step + 1);
    r.nan_action = nan_.after_step(step + 1, r.loss, r.report.clip.norm);
  }
  tokens_seen_ += std::int64_t(r.rows);
  return r;
}

double Trainer::evaluate() {
  // Its collectives (zero 3 gathers, the sums) are charged to "eval", not to
  // the step's exposed communication.
  const double comm0 = phase_total("comm/");
  struct Charge {
    double& to;
    double from;
    ~Charge() { to += phase_total("comm/") - from; }
  } charge{eval_comm_s_, comm0};
  ScopedRegion region("eval", true);
  const std::int64_t n = cfg_.get_int("train.eval_batches");
  val_tasks_.assign(2 * data_.tasks().size(), 0.0);
  bool any = false;
  for (std::size_t k = 0; k < data_.size(); ++k) any = any || data_.stream(k).sampler.n_val_windows() > 0;
  if (!any || n == 0) return std::numeric_limits<double>::quiet_NaN();
  // Validation batch i is the same global batch of samples in every layout
  // (global_batch sequences), each rank evaluating its slice in micro-batches,
  // so the validation loss, like the training loss, does not depend on dp
  // (nor on cp: the Cp group's ranks evaluate their rows of the same
  // sequences, and the sums run over the whole data group). Each stream
  // has its own validation split: eval_batches of each, summed per task
  // and over all.
  for (std::size_t k = 0; k < data_.size(); ++k) {
    const io::Sampler& sampler = data_.stream(k).sampler;
    if (sampler.n_val_windows() == 0) continue;
    const std::size_t task = data_.task_of(k);
    for (std::int64_t i = 0; i < n; ++i) {
      const int dp = grid_.sizes().dp;
      parallel::StepWork work{[&](int j) {
        return batch_.load(sampler.val_batch(i * grad_accum_ + j, micro_batch_ * dp, grid_.coords().dp, dp));
      }};
      work.documents = sampler.packed();
      const auto e = exec_->forward_only(work, int(grad_accum_));
      val_tasks_[2 * task] += e.ce_sum;
      val_tasks_[2 * task + 1] += double(e.n_valid);
    }
  }
  double sum = 0, count = 0;
  for (std::size_t t = 0; t < data_.tasks().size(); ++t) {
    val_tasks_[2 * t] = dp_->sum(val_tasks_[2 * t]);
    val_tasks_[2 * t + 1] = dp_->sum(val_tasks_[2 * t + 1]);
    sum += val_tasks_[2 * t];
    count += val_tasks_[2 * t + 1];
  }
  return count > 0 ? sum / count : std::numeric_limits<double>::quiet_NaN();
}

io::OptimizerState Trainer::optimizer_moments() {
  io::OptimizerState state;
  const auto& store = dp_->store();
  for (std::size_t i = 0; i < store.size(); ++i)
    if (store.spec(i).trainable) {  // the frozen model has no moments
      const std::string& name = store.spec(i).name;
      state[name] = io::OptimizerMoments{opt_->adamw().exp_avg(i), opt_->adamw().exp_avg_sq(i),
                                         dp_->has_residual(name), dp_->residual(name)};
    }
  return state;
}

io::CheckpointMeta Trainer::checkpoint_meta(std::int64_t steps_done) {
  io::CheckpointMeta meta;
  meta.step = static_cast<std::uint64_t>(steps_done);
  meta.tokens_seen = static_cast<std::uint64_t>(tokens_seen_);
  meta.data_cursor = static_cast<std::uint64_t>(steps_done);  // the sampler is a pure function of the step
  meta.rng_state = {static_cast<std::uint64_t>(data_.seed())};
  meta.lr_schedule = {{"lr", opt_->schedule().lr()},
                      {"min_lr", opt_->schedule().min_lr()},
                      {"warmup_steps", double(opt_->schedule().warmup_steps())},
                      {"total_steps", double(opt_->schedule().total_steps())},
                      {"next_step", double(steps_done)},
                      {"adamw_step_count", double(opt_->adamw().step_count())}};
  meta.deck = cfg_.deck_text();
  meta.config_json = cfg_.to_json();
  meta.layout.world_size = comm_size(world_);
  meta.layout.dp = grid_.sizes().dp;
  meta.layout.cp = grid_.sizes().cp;
  meta.layout.tp = grid_.sizes().tp;
  meta.layout.zero = dp_->options().zero;
  meta.layout.ep = grid_.sizes().ep;
  meta.layout.pp = grid_.sizes().pp;
  balance_.save(meta);
  growth_.save(meta);
  if (base_root_ != 0) meta.state[kLoraBaseState] = root_to_state(base_root_);
  if (scaler_.dynamic()) {
    const auto st = scaler_.state();
    meta.state[optim::LossScaler::kStateName] = io::StateArray{{std::int64_t(st.size())}, st};
  }
  if (const auto st = replace_.state(grid_.sizes().ep); !st.empty())
    meta.state[ExpertReplacement::kStateName] = io::StateArray{{std::int64_t(st.size())}, st};
  return meta;
}

std::string Trainer::save(std::int64_t steps_done) {
  // The run's last checkpoint (the end, or a stop signal) is never skipped.
  return ckpt_->save_tier2(steps_done, steps_done >= steps_ || stop_.signal() != 0);
}

void Trainer::load(const std::string& path, const std::vector<std::string>& copies) { ckpt_->load(path, copies); }

void Trainer::restore(const io::CheckpointMeta& meta) {
  // The checkpoint holds the experts in global order; the run's placement
  // comes back where the layout allows.
  const auto rs = meta.state.find(ExpertReplacement::kStateName);
  replace_.restore(rs != meta.state.end() ? &rs->second.values : nullptr, grid_.sizes().ep,
                   [&](const parallel::expert::ExpertMove& m) { move_experts(m); });
  dp_->params_updated();
  balance_.restore(meta, *model_);
  growth_.restore(meta, mcfg_.n_experts);
  apply_clone_rings();
  if (const auto it = meta.state.find(optim::LossScaler::kStateName); it != meta.state.end())
    scaler_.restore(it->second.values);
  if (const auto it = meta.state.find(kLoraBaseState); it != meta.state.end()) {
    const std::uint64_t was = root_from_state(it->second);
    EXA_REQUIRE(base_root_ == 0 || base_root_ == was,
                "checkpoint {} fine-tuned the model with Merkle root {:016x}, but train.init_from = \"{}\" has root "
                "{:016x}: a resume must keep the model it adapts. Set train.init_from back to that model, or start "
                "a new run (another output.run_dir)", meta.directory, was, cfg_.get_string("train.init_from"),
                base_root_);
    base_root_ = was;
  }
  // Top-k's residuals: what the holders owe, summed and divided by the
  // data-parallel size, is what the mean gradient is owed; a checkpoint of
  // another size keeps that (io/checkpoint.hpp folded the rows).
  const double data_was = double(meta.layout.dp * meta.layout.cp), data_now = double(dp_->size());
  if (data_was != data_now && dp_->options().topk.enabled()) {
    dp_->scale_residuals(float(data_now / data_was));
    log::info("checkpoint: top-k residuals of {} data-parallel ranks folded into {} (scaled by {:g})", data_was,
              data_now, data_now / data_was);
  }
  step_ = static_cast<std::int64_t>(meta.step);
  tokens_seen_ = static_cast<std::int64_t>(meta.tokens_seen);
  const auto it = meta.lr_schedule.find("adamw_step_count");
  opt_->adamw().set_step_count(it != meta.lr_schedule.end() ? static_cast<std::int64_t>(it->second) : step_);
  restore_teacher();
  log::info("checkpoint: resumed from {} at step {}", meta.directory, step_);
}

void LogInterval::begin(double eval_comm) {
  *this = LogInterval{};
  t0 = wall_seconds();
  phases0 = phase_timers().all();
  eval_comm0 = eval_comm;
  traffic0 = comm::TrafficLedger::totals();
}

void LogInterval::add(const StepResult& r) {
  ++steps;
  sum.loss += r.loss;
  sum.ce += r.ce;
  sum.aux += r.aux;
  sum.z += r.z;
  sum.distill += r.distill;
  sum.teacher_s += r.teacher_s;
  if (r.teacher_s > 0) ++distill_steps;
  sum.imbalance = std::max(sum.imbalance, r.imbalance);
  sum.report = r.report;
  sum.moe = r.moe;  // the logged step's loads
  sum.rows += r.rows;
  sum.tokens += r.tokens;
  sum.targets += r.targets;
  sum.projection_conflicts += r.projection_conflicts;
  sum.projection_cosines = r.projection_cosines;  // the logged step's
  if (sum.task_sums.size() < r.task_sums.size()) sum.task_sums.resize(r.task_sums.size(), 0.0);
  for (std::size_t i = 0; i < r.task_sums.size(); ++i) sum.task_sums[i] += r.task_sums[i];
}

double LogInterval::phase(const char* prefix) const {
  double t = 0;
  for (const auto& [name, sec] : phase_timers().all()) {
    if (name.rfind(prefix, 0) != 0) continue;
    const auto it = phases0.find(name);
    t += sec - (it != phases0.end() ? it->second : 0.0);
  }
  return t;
}

void Trainer::log_interval(const LogInterval& iv, bool line_due, bool record_due) {
  // Losses are reported as the interval's mean (as Megatron-LM logs them).
  const std::int64_t steps_in_interval = std::max<std::int64_t>(1, iv.steps);
  const double interval_s = wall_seconds() - iv.t0;
  StepResult r = iv.sum;
  const double mean = 1.0 / double(steps_in_interval);
  r.loss *= mean;
  r.ce *= mean;
  r.aux *= mean;
  r.z *= mean;
  const std::optional<double> val = iv.val;
  StepLog s;
  s.step = step_;
  s.steps = steps_;
  s.tokens_seen = tokens_seen_;
  s.loss = r.loss;
  s.ce = r.ce;
  s.aux = r.aux;
  s.z = r.z;
  s.val_loss = val;
  if (val && val_tokens_per_byte_ > 0) s.val_bpb = *val / std::log(2.0) * val_tokens_per_byte_;
  s.lr = r.report.lr;
  s.grad_norm = r.report.clip.norm;
  s.skipped = !r.report.applied;
  s.nonfinite_steps = nan_.nonfinite_steps();
  if (scaler_.dynamic()) {
    s.loss_scale = scaler_.scale();
    s.overflow_skips = scaler_.overflow_skips();
  }
  const double tokens = iv.sum.rows;  // rows computed, padding included (what the FLOPs are spent on)
  s.tokens_per_s = tokens / interval_s;
  const double flops_per_rank = flops_.per_token_train * tokens / comm_size(world_) / interval_s;
  s.tflops = flops_per_rank * comm_size(world_) * 1e-12;
  s.mfu = peak_gflops_ > 0 ? flops_per_rank / (peak_gflops_ * 1e9) : 0.0;
  s.imbalance = r.imbalance;
  s.moe_summary = parallel::expert::moe_summary(r.moe, grid_.sizes().ep, replace_.placement().get());
  s.moe = parallel::expert::moe_json(r.moe, grid_.sizes().ep, balance_.bias(), replace_.placement().get());
  const double k = 1.0 / double(steps_in_interval);
  // Communication is what the rank spent launching, polling and waiting
  // (what overlap did not hide); compute is the rest of the step.
  s.t_comm = (iv.phase("comm/") - (eval_comm_s_ - iv.eval_comm0)) * k;
  s.t_a2a = iv.phase("comm/all_to_all") * k;  // the expert dispatch's share (counts included)
  s.t_a2a_overlapped = iv.phase("moe/overlapped") * k;
  s.t_tp = iv.phase("comm/tp_") * k;           // tensor parallelism's (activations and replicated gradients)
  s.t_context = iv.phase("comm/context/") * k;  // ring / all-to-all attention waits
  s.t_compress = iv.phase("compress/") * k;     // comm.compression's kernels (run inside the comm waits)
  s.t_io = iv.phase("io/") * k;
  s.t_eval = iv.phase("eval") * k;
  s.t_compute = std::max(0.0, interval_s * k - s.t_comm - s.t_io - s.t_eval);
  const auto mem = dp_->memory();
  s.mem_params = mem.params;
  s.mem_grads = mem.grads;
  s.mem_buffers = mem.buffers;
  s.mem_optim = double(opt_->bytes());
  // AdamW keeps two fp32 moments per master element.
  s.mem_experts = mem.expert_params + mem.expert_grads + 2.0 * mem.expert_master;
  s.mem_activations = double(model_->activation_bytes());
  s.mem_peak_rss = double(peak_rss_bytes());
  // The records' intervals cover the run without gaps or overlaps, so they
  // carry the energy; a line between two records shows none.
  if (record_due) energy_.report(s, interval_s, tokens);
  auto record = to_json(s);
  std::string line = format_line(s);
  // The bytes ledger: this rank's logical (fp32) and wire bytes per step.
  const auto traffic = comm::TrafficLedger::totals();
  for (int t = 0; t < comm::kTrafficKinds; ++t) {
    const auto& now = traffic[std::size_t(t)];
    const auto& then = iv.traffic0[std::size_t(t)];
    const double logical = (now.logical - then.logical) * k, wire = (now.wire - then.wire) * k;
    record["comm"][comm::TrafficLedger::name(comm::Traffic(t))] = {{"logical_bytes", logical}, {"wire_bytes", wire}};
    if (wire < logical)
      line += fmt::format(" | {} wire {:.1f}%", comm::TrafficLedger::name(comm::Traffic(t)), 100.0 * wire / logical);
  }
  if (data_.tasks().size() > 1 && !iv.sum.task_sums.empty()) {
    // Each task's mean over its valid targets in the interval (and at the
    // last evaluation).
    for (std::size_t t = 0; t < data_.tasks().size(); ++t) {
      const double c = iv.sum.task_sums[2 * t + 1], mean = c > 0 ? iv.sum.task_sums[2 * t] / c : 0.0;
      auto& rec = record["tasks"][data_.tasks()[t]];
      rec = {{"loss", c > 0 ? nlohmann::json(mean) : nlohmann::json(nullptr)}, {"targets", c * k}};
      if (val && val_tasks_.size() == 2 * data_.tasks().size() && val_tasks_[2 * t + 1] > 0)
        rec["val_loss"] = val_tasks_[2 * t] / val_tasks_[2 * t + 1];
      line += c > 0 ? fmt::format(" | {} {:.4f}", data_.tasks()[t], mean) : fmt::format(" | {} -", data_.tasks()[t]);
    }
  }
  if (projection_.enabled()) {
    record["grad_projection"] = {{"conflicts", double(iv.sum.projection_conflicts) * k},
                                 {"cosines", iv.sum.projection_cosines}, {"bytes", projection_.bytes()}};
    line += fmt::format(" | pcgrad {:.2g} conflicts", double(iv.sum.projection_conflicts) * k);
    if (!iv.sum.projection_cosines.empty()) line += fmt::format(" cos {:.3f}", iv.sum.projection_cosines.front());
  }
  const io::Sampler& first = data_.stream(0).sampler;
  if (first.budget() || first.packed() || data_.size() > 1) {
    // Variable batches: the interval's mean global batch per step, and the
    // share of its rows that were padding.
    const double rows = iv.sum.rows * k, toks = iv.sum.tokens * k, pad = rows > 0 ? 1.0 - toks / rows : 0.0;
    record["batch"] = {{"rows", rows}, {"tokens", toks}, {"targets", iv.sum.targets * k}, {"padding", pad}};
    line += fmt::format(" | batch {:.0f} tok pad {:.1f}%", toks, 100.0 * pad);
  }
  if (iv.distill_steps > 0) {
    // The interval's distillation steps: the term's mean and the teacher's
    // forward per step (inside the step time above).
    const double ks = 1.0 / double(iv.distill_steps);
    record["distill"] = {{"steps", iv.distill_steps}, {"loss", iv.sum.distill * ks},
                         {"teacher_s", iv.sum.teacher_s * ks}, {"teacher_bytes", teacher_ ? teacher_->bytes() : 0.0}};
    line += fmt::format(" | distill {:.4f} teacher {:.1f} ms", iv.sum.distill * ks, 1e3 * iv.sum.teacher_s * ks);
  }
  if (const auto st = exec_->stats(); !st.key.empty()) {
    record[st.key] = st.record;
    line += st.line;
  }
  std::string mem_line;
  if (record_due && MemoryLedger::installed()) {
    // The ledger's bytes by category: the interval's peak and now; the
    // log gets the peaks as one line of their own.
    const auto bytes = MemoryLedger::snapshot();
    mem_line = "memory peak (MiB, this rank):";
    for (int c = 0; c < kMemCategories; ++c) {
      const auto& b = bytes[std::size_t(c)];
      record["mem"][MemoryLedger::name(MemCategory(c))] = {{"peak", b.peak}, {"current", b.current}};
      mem_line += fmt::format("{} {} {:.1f}", c ? "," : "", MemoryLedger::name(MemCategory(c)), b.peak / 1048576.0);
    }
    MemoryLedger::restart_peaks();
  }
  if (line_due) log::info("{}", line);
  if (line_due && !mem_line.empty()) log::info("{}", mem_line);
  if (record_due) metrics_->write(record);
}

void Trainer::log_offload() const {
  const auto& file = dp_->store().offload_file();
  if (file == nullptr) return;
  // Sampled at every layer boundary and optimizer piece (model/expert_offload.hpp).
  std::string by;
  for (const auto& u : file->usage())
    by += fmt::format("{}{} {:.2f} of {:.2f}", by.empty() ? "" : ", ", u.label.substr(u.label.rfind(':') + 1),
                      u.peak_resident / 1048576.0, u.offloaded / 1048576.0);
  if (const auto* off = dp_->offload())
    log::info("expert offload: peak resident MiB (rank 0): {}; one expert {:.3f} MiB, at most {} used by a layer, "
              "prefetch depth {}",
              by, off->expert_bytes() / 1048576.0, off->max_used_per_layer(), off->depth());
  else
    log::info("expert offload: peak resident MiB (rank 0): {}", by);
}

void Trainer::move_experts(const parallel::expert::ExpertMove& move) {
  ScopedRegion region("comm/expert_move", true);
  const auto& c = grid_.coords();
  const parallel::expert::MoverRank where{grid_.comm(comm::Group::Data), c.ep, c.expert_data};
  // AdamW's moments cover the trainable tensors only (under LoRA the
  // frozen experts have none: their adapters' moments move).
  parallel::expert::move_experts(dp_->store(),
                                 {dp_->store().values(), opt_->adamw().exp_avg(), opt_->adamw().exp_avg_sq()}, where,
                                 move, {false, true, true});
  // Top-k's residuals (what each rank still owes of each expert's
  // gradient) go with their experts; each expert's sum of them over the
  // ranks must be the same after the move.
  std::vector<View1<float>> residuals(dp_->store().size());
  bool any = false;
  for (std::size_t i = 0; i < residuals.size(); ++i) {
    const auto& name = dp_->store().spec(i).name;
    if (dp_->store().spec(i).ep_dim >= 0 && dp_->has_residual(name)) residuals[i] = dp_->residual(name), any = true;
  }
  if (any) {
    const auto before = parallel::expert::expert_box_checksums(dp_->store(), residuals, where, move.layer, move.from);
    parallel::expert::move_expert_boxes(dp_->store(), residuals, where, move);
    const auto after = parallel::expert::expert_box_checksums(dp_->store(), residuals, where, move.layer, move.to);
    EXA_ASSERT(before == after);
  }
  dp_->params_updated();
}

void Trainer::inject_fault(std::int64_t steps_done) const {
  // Fault injection for the restart and failure tests: a hard exit, as a
  // node failure would end the job, with no clean-up and no final save.
  // EXAMOE_FAULT_RANK=N limits it to world rank N (a node failure takes out
  // some ranks, not all).
  // EXAMOE_FAULT_STEP_DELAY_S=x: x seconds of sleep after every step, so
  // that a signal test's signal lands in a run that a fast machine would
  // otherwise finish first (80 small steps took 0.2 s on an AVX-512 core).
  static const double delay = [] {
    const char* d = std::getenv("EXAMOE_FAULT_STEP_DELAY_S");
    return d != nullptr ? std::atof(d) : 0.0;
  }();
  if (delay > 0) std::this_thread::sleep_for(std::chrono::duration<double>(delay));
  // EXAMOE_FAULT_HOLD_AFTER_STEP=N: after step N, wait for a stop signal (at
  // most 60 s), so that a signal sent on seeing step N logged lands before
  // the run can end, however fast its steps are.
  static const char* hold = std::getenv("EXAMOE_FAULT_HOLD_AFTER_STEP");
  if (hold != nullptr && std::atoll(hold) == steps_done) {
    const auto until = std::chrono::steady_clock::now() + std::chrono::seconds(60);
    while (!StopSignal::received() && std::chrono::steady_clock::now() < until)
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    if (!StopSignal::received())
      log::warn("EXAMOE_FAULT_HOLD_AFTER_STEP={}: no stop signal came in 60 s; going on", hold);
  }
  static const char* when = std::getenv("EXAMOE_FAULT_EXIT_AFTER_STEP");
  static const char* who = std::getenv("EXAMOE_FAULT_RANK");
  // EXAMOE_FAULT_THROW_AFTER_STEP=N: an exa::Error on that rank alone (a
  // disk or data error of one rank), while the others go on to the next
  // step's collectives.
  static const char* throw_at = std::getenv("EXAMOE_FAULT_THROW_AFTER_STEP");
  if (throw_at != nullptr && std::atoll(throw_at) == steps_done &&
      (who == nullptr || std::atoi(who) == comm_rank(world_)))
    throw Error(fmt::format("EXAMOE_FAULT_THROW_AFTER_STEP={}: an error on rank {} alone after step {} (fault "
                            "injection)",
                            throw_at, comm_rank(world_), steps_done));
  if (when == nullptr || std::atoll(when) != steps_done) return;
  if (who != nullptr && std::atoi(who) != comm_rank(world_)) return;
  log::warn("EXAMOE_FAULT_EXIT_AFTER_STEP={}: rank {} exiting abruptly after step {} (fault injection)", when,
            comm_rank(world_), steps_done);
  // Its node's memory goes with it: the tier-0 segments this rank keeps.
  ckpt_->lose_held(comm_rank(world_));
  // EXAMOE_FAULT_SIGNAL=9: die by that signal (kill -9) instead of exiting.
  if (const char* sig = std::getenv("EXAMOE_FAULT_SIGNAL")) std::raise(std::atoi(sig));
  std::_Exit(86);
}

void Trainer::rollback(std::int64_t bad_step) {
  const std::uint64_t to = ckpt_->rollback(bad_step);
  nan_.rolled_back(bad_step, step_);
  metrics_->write(nlohmann::json{{"event", "rollback"}, {"from_step", bad_step}, {"to_step", to},
                                 {"nonfinite_steps", nan_.nonfinite_steps()}});
}

model::ParameterStore::Flat Trainer::trainable_values() {
  const auto& s = dp_->store();
  return Kokkos::subview(s.values(), Kokkos::make_pair(std::int64_t(0), s.trainable_numel()));
}

void Trainer::masters_replaced() { dp_->params_updated(); }

double Trainer::run() {
  const std::int64_t log_every = cfg_.get_int("train.log_every");
  const std::int64_t metrics_every = cfg_.get_int("output.metrics_every");
  const std::int64_t eval_every = cfg_.get_int("train.eval_every");
  // output.trace_steps: a timeline of this run's first steps, per rank.
  const std::int64_t trace_from = step_, trace_until = step_ + cfg_.get_int("output.trace_steps");
  const std::string trace_path =
      (fs::path(run_dir_) / fmt::format("trace.rank{}.json", comm_rank(world_))).string();
  if (trace_until > step_) Trace::start(comm_rank(world_));
  const io::Sampler& first = data_.stream(0).sampler;
  std::string batch =
      first.budget()
          ? fmt::format("global batch {} micro-batches of up to {} tokens (lengths {})", grad_accum_ * grid_.sizes().dp,
                        cfg_.get_int("train.batch_tokens"), fmt::join(first.budget()->lengths(), ", "))
          : fmt::format("global batch {} x {} tokens{}", global_batch_, mcfg_.seq_len,
                        first.packed() ? " (packed documents)" : "");
  if (projection_.enabled())
    batch += fmt::format("; pcgrad over {} tasks, one round each ({} micro-batches per rank), {} task gradients and "
                         "2 buffers of this rank's part kept",
                         projection_.tasks(), grad_accum_ / projection_.tasks(), projection_.tasks());
  if (data_.size() > 1) {
    std::vector<std::string> parts;
    for (std::size_t k = 0; k < data_.size(); ++k)
      parts.push_back(fmt::format("{} {:g}", data_.stream(k).task, data_.stream(k).weight));
    batch += fmt::format(" from {} streams by weight ({})", data_.size(), fmt::join(parts, ", "));
  }
  if (federated_.sites > 1)
    batch += fmt::format("; one of {} federated sites, averaged every {} steps", federated_.sites,
                         federated_.local_steps);
  log::info("training {} steps from step {}: {}, {:.2f}M parameters ({:.2f}M active per token), {}, gemm peak "
            "{:.1f} GFLOP/s per rank ({} cores)",
            steps_, step_, batch, double(dp_->model_numel()) / 1e6, flops_.active_params / 1e6,
            model::describe_precision(), peak_gflops_, peak_cores_);
  if (mcfg_.lora.enabled()) {
    std::int64_t trainable = 0;
    for (const auto& s : model::parameter_specs(mcfg_))
      if (s.trainable) trainable += s.numel();
    log::info("lora: rank {}, alpha {:g}, {:.4f}M trainable parameters ({:.2f}% of {:.2f}M), the rest frozen",
              mcfg_.lora.rank, mcfg_.lora.alpha, double(trainable) / 1e6,
              100.0 * double(trainable) / double(dp_->model_numel()), double(dp_->model_numel()) / 1e6);
  }
  energy_.restart();
  const std::int64_t tokens0 = tokens_seen_;
  LogInterval line, record;
  line.begin(eval_comm_s_);
  record.begin(eval_comm_s_);
  double last_val = std::numeric_limits<double>::quiet_NaN();
  bool finished = false;  // the step hook ended the run: complete, as at train.steps
  while (step_ < steps_) {
    const StepResult r = train_step(step_);
    if (r.nan_action == NanGuard::Action::rollback) {
      rollback(step_ + 1);
      line.begin(eval_comm_s_);
      record.begin(eval_comm_s_);
      continue;
    }
    ++step_;
    comm::Watchdog::set_progress(step_);
    replica_.inject(step_, *dp_);
    if (replica_.due(step_)) metrics_->write(replica_.run(step_, *dp_));
    for (auto rec : r.replaced) {
      rec["event"] = "expert_replacement";
      rec["step"] = step_;
      metrics_->write(rec);
    }
    // A scheduler's signal: log, save, return. A step hook (federated
    // rounds) agrees on it itself, and ends the run complete otherwise.
    bool ended = false, stop = false;
    if (step_hook_) {
      const bool over = !step_hook_(step_);
      stop = over && stop_.signal() != 0;
      ended = over && !stop;
    } else {
      stop = step_ < steps_ && stop_.agreed(world_);
    }
    line.add(r);
    record.add(r);
    if (eval_every > 0 && (step_ % eval_every == 0 || step_ == steps_)) {
      last_val = evaluate();
      if (!std::isnan(last_val)) line.val = record.val = last_val;
    }
    const bool last = stop || ended || step_ == steps_;
    // A run the hook ended is complete: its end is the last step's.
    const CheckpointsDue due = ckpt_->due(step_, ended ? step_ : steps_, stop);
    // A snapshot ends the record interval, and the record is flushed before
    // the snapshot is taken: a resume from it then logs from the next step,
    // so every step is in metrics.jsonl exactly once. (With the record
    // after the snapshot, a rank that died right after the snapshot could
    // take rank 0 down before it wrote the step.)
    const bool line_due = last || step_ % log_every == 0;
    const bool record_due = last || step_ % metrics_every == 0 || due.any();
    if (line_due && record_due && line.steps == record.steps) {
      log_interval(record, true, true);  // the same steps: one summary serves both
    } else {
      if (line_due) log_interval(line, true, false);
      if (record_due) log_interval(record, false, true);
    }
    if (line_due) line.begin(eval_comm_s_);
    if (record_due) record.begin(eval_comm_s_);
    cap_.check(step_);  // memory.cap_gb: every rank stops here if one went above it
    // Expert growth after the step's log (its loads and placement are of
    // the model that ran it) and before its checkpoint (which holds the
    // grown model, the model of this step count).
    if (growth_.schedule().grows_after(step_)) grow(step_);
    ckpt_->save(due, step_, last);
    dp_->release_offloaded();  // evaluation, checks and the checkpoint read every expert
    if (Trace::on() && (step_ >= trace_until || last)) {
      Trace::stop_and_write(trace_path);
      log::info("trace: the timeline of steps {}..{} is in {} (each rank's trace.rank<R>.json; chrome://tracing or "
                "ui.perfetto.dev)",
                trace_from + 1, step_, trace_path);
    }
    inject_fault(step_);
    if (stop || ended) {
      finished = ended;
      break;
    }
  }
  ckpt_->finish(step_ == steps_ || finished);  // a stop signal's run keeps tier 0
  log_offload();
  metrics_->write(nlohmann::json{{"event", "end"}, {"step", step_}, {"val_loss", last_val}});
  if (const auto e = energy_.summary(double(tokens_seen_ - tokens0), double(steps_ * global_batch_ * mcfg_.seq_len));
      !e.empty())
    log::info("{}", e);
  return last_val;
}

}  // namespace exa::train
