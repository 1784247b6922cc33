#include "train/distillation.hpp"

#include <filesystem>

#include "core/error.hpp"
#include "core/profiling.hpp"
#include "model/growth_schedule.hpp"
#include "parallel/build_model.hpp"
#include "parallel/data/data_parallel.hpp"
#include "parallel/step_executor.hpp"
#include "train/saved_routing.hpp"

namespace exa::train {

DistillOptions DistillOptions::from_deck(const deck::Config& cfg) {
  DistillOptions o;
  o.steps = cfg.get_int("growth.distill_steps");  // the deck checks refuse it without growth
  if (cfg.get_int("growth.every") == 0) o.steps = 0;
  o.coef = cfg.get_float("growth.distill_coef");
  o.temperature = cfg.get_float("growth.distill_temperature");
  return o;
}

std::int64_t distillation_event(const deck::Config& cfg, std::int64_t step) {
  const auto opt = DistillOptions::from_deck(cfg);
  if (!opt.enabled()) return 0;
  const auto g = model::GrowthSchedule::from_deck(cfg);
  for (std::int64_t s = step; s > 0 && s > step - opt.steps; --s)
    if (g.grows_after(s)) return s;
  return 0;
}

std::string missing_teacher(std::int64_t event, std::int64_t steps, const std::string& dir, const std::string& why) {
  return fmt::format(
      "distillation: the resumed step is inside the distillation window of the growth event after step {} "
      "(growth.distill_steps = {}), and its teacher, the model before that event, cannot be read from {}: {}. "
      "Restore that directory, resume from a checkpoint outside the window (before step {} or from step {} on), "
      "or set growth.distill_steps = 0",
      event, steps, dir, why, event, event + steps);
}

namespace {

model::ModelConfig frozen(model::ModelConfig m) {
  m.frozen = true;
  return m;
}

}  // namespace

Teacher::Teacher(const parallel::ParallelLayout& layout, model::ModelConfig mcfg, const deck::Config& cfg,
                 DistillOptions opt, std::int64_t event_step, std::int64_t micro_batch)
    : opt_(opt), event_(event_step) {
  layout_ = std::make_unique<parallel::ParallelLayout>(layout.with_model(frozen(std::move(mcfg))));
  dp_ = std::make_unique<parallel::data::DataParallel>(*layout_);
  // Forward only: nothing to recompute.
  auto mo = model::ModelOptions::from_deck(cfg);
  mo.recompute = model::Recompute::none;
  mo.checkpoint_layers = 1;
  model_ = parallel::build_model(*layout_, mo);
  model_->add_hooks(dp_.get());
  exec_ = parallel::make_step_executor(*layout_, {*model_, dp_->weights(), dp_->grads(), dp_.get()}, micro_batch);
}

Teacher::~Teacher() = default;

model::ParameterStore& Teacher::store() { return dp_->store(); }

void Teacher::ready(const io::CheckpointMeta& saved) {
  dp_->params_updated();
  route_as_saved(saved, *model_);
}

void Teacher::run(const std::function<Input(int)>& input, int n_micro,
                  const std::function<model::MicroBatchShape(int)>& shape, bool documents) {
  const double t0 = wall_seconds();
  ScopedRegion region("distill/teacher", true);
  soft_.resize(std::size_t(n_micro));
  parallel::StepWork work{[&](int j) {
    Input in = input(j);
    in.soft_out = &soft_[std::size_t(j)];
    in.temperature = opt_.temperature;
    return in;
  }};
  work.shape = shape;
  work.documents = documents;
  exec_->forward_only(work, n_micro);
  last_s_ = wall_seconds() - t0;
}

void Teacher::attach(Input& in, int j) const {
  if (std::size_t(j) >= soft_.size() || soft_[std::size_t(j)].probs.data() == nullptr) return;  // not the head's stage
  in.soft_in = soft_[std::size_t(j)];
  in.temperature = opt_.temperature;
  in.distill_coef = opt_.coef;
}

double Teacher::bytes() const {
  const auto m = dp_->memory();
  double b = m.params + m.buffers + double(model_->activation_bytes());
  for (const auto& s : soft_) b += double(s.probs.span() * sizeof(float) + s.neg_entropy.span() * sizeof(double));
  return b;
}

std::string Teacher::snapshot_dir(const std::string& checkpoint_dir) {
  return (std::filesystem::path(checkpoint_dir) / "teacher").string();
}

std::string Teacher::snapshot_step_dir(const std::string& checkpoint_dir, std::int64_t event_step) {
  return (std::filesystem::path(snapshot_dir(checkpoint_dir)) / fmt::format("step_{:08d}", event_step)).string();
}

void Teacher::save(const std::string& checkpoint_dir, io::CheckpointMeta saved, MPI_Comm comm) {
  ScopedRegion region("io/checkpoint", true);
  io::SaveOptions so;
  so.keep = 0;  // one per event; a resume inside any window still retained may need it
  saved.step = std::uint64_t(event_);
  io::save_checkpoint(snapshot_dir(checkpoint_dir), store(), nullptr, saved, comm, so);
}

void Teacher::load(const std::string& checkpoint_dir, MPI_Comm comm) {
  const std::string dir = snapshot_step_dir(checkpoint_dir, event_);
  io::CheckpointMeta meta;
  try {
    meta = io::load_checkpoint(dir, store(), nullptr, comm);
  } catch (const Error& e) {
    throw Error(missing_teacher(event_, opt_.steps, dir, e.what()));
  }
  EXA_REQUIRE(meta.step == std::uint64_t(event_), "distillation: {} holds step {}, not the event after step {}", dir,
              meta.step, event_);
  ready(meta);
}

}  // namespace exa::train
