#pragma once
// Expert growth's distillation (the deck's growth.distill_*;
// docs/architecture.md "Distillation"). At a growth event the model before
// it becomes a frozen teacher, in the same layout: for the next
// growth.distill_steps steps it runs forward on each micro-batch first, and
// the student's loss adds
//   distill_coef * T^2 * KL(softmax(teacher / T) || softmax(student / T))
// averaged over the valid targets like the cross-entropy. The teacher
// holds its weights (no gradients, no optimizer state) and one micro-batch
// of soft targets per micro-batch of the step, on the stage that holds the
// head; it is dropped when its window ends.
//
// A resume inside a window needs the teacher again: the event writes it
// as a model-only checkpoint, <checkpoint dir>/teacher/step_<event>, with
// the routing state it routed with; any layout reads it back.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "core/deck/config.hpp"
#include "io/checkpoint/checkpoint.hpp"
#include "model/stage_model.hpp"
#include "parallel/layout.hpp"

namespace exa::parallel {
class StepExecutor;
namespace data {
class DataParallel;
}
}  // namespace exa::parallel

namespace exa::train {

struct DistillOptions {
  std::int64_t steps = 0;  // 0: off
  double coef = 1, temperature = 2;
  static DistillOptions from_deck(const deck::Config& cfg);
  bool enabled() const { return steps > 0; }
};

// The growth event (its steps done) whose distillation window holds
// training step `step` (0-based), or 0 when none does.
std::int64_t distillation_event(const deck::Config& cfg, std::int64_t step);

// The error of a resume inside the window of the growth event after
// `event` (growth.distill_steps = `steps`) whose teacher `dir` cannot be
// read (`why`): the run's and examoe --check's.
std::string missing_teacher(std::int64_t event, std::int64_t steps, const std::string& dir, const std::string& why);

class Teacher {
 public:
  using Input = model::StageModel<float>::Input;

  // The frozen copy of `mcfg` (the model before the event after
  // `event_step` steps) over `layout`'s ranks, experts in global order. Its
  // tensors are not drawn: fill store() (from the running model, or
  // load()), then call ready(). Collective over the layout's world.
  Teacher(const parallel::ParallelLayout& layout, model::ModelConfig mcfg, const deck::Config& cfg,
          DistillOptions opt, std::int64_t event_step, std::int64_t micro_batch);
  ~Teacher();
  Teacher(const Teacher&) = delete;
  Teacher& operator=(const Teacher&) = delete;

  model::ParameterStore& store();
  // The tensors are in store(): working copies made, routing as `saved`
  // says (router biases and clone families of the model before the event).
  void ready(const io::CheckpointMeta& saved);

  std::int64_t event_step() const { return event_; }
  // Whether training step `step` (0-based; the first after the event is
  // event_step()) distils.
  bool covers(std::int64_t step) const { return step >= event_ && step < event_ + opt_.steps; }

  // The teacher's forward of micro-batches 0..n_micro-1, keeping each one's
  // soft targets (only the stage that holds the head has them).
  // `shape` and `documents`: as StepWork's (differing shapes, packed
  // documents every stage reads).
  void run(const std::function<Input(int)>& input, int n_micro,
           const std::function<model::MicroBatchShape(int)>& shape = {}, bool documents = false);
  // Micro-batch j's input for the student: the soft targets and the term.
  void attach(Input& in, int j) const;
  double last_seconds() const { return last_s_; }
  // This rank's bytes: weights (working copies included), the activation
  // context its forward keeps, and the soft targets.
  double bytes() const;

  // Where the snapshot of the event after `event_step` steps lives.
  static std::string snapshot_dir(const std::string& checkpoint_dir);
  static std::string snapshot_step_dir(const std::string& checkpoint_dir, std::int64_t event_step);
  // Writes store() and `saved` there (collective).
  void save(const std::string& checkpoint_dir, io::CheckpointMeta saved, MPI_Comm comm);
  // Reads the snapshot (any layout wrote it) into store() and calls
  // ready(); exa::Error naming the directory and the fix when it is
  // missing or damaged.
  void load(const std::string& checkpoint_dir, MPI_Comm comm);

 private:
  DistillOptions opt_;
  std::int64_t event_ = 0;
  std::unique_ptr<parallel::ParallelLayout> layout_;
  std::unique_ptr<parallel::data::DataParallel> dp_;
  std::unique_ptr<model::StageModel<float>> model_;
  std::unique_ptr<parallel::StepExecutor> exec_;
  std::vector<model::SoftTargets<float>> soft_;  // per micro-batch (on the stage that holds the head)
  double last_s_ = 0;
};

}  // namespace exa::train
