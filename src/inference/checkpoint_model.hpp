#pragma once
// A trained model loaded back from a checkpoint for inference (`examoe eval`,
// `examoe-generate`): the configuration is rebuilt from what the checkpoint
// stores, so the user passes only the checkpoint.
//
//   exa::inference::CheckpointModel m("runs/tiny", MPI_COMM_WORLD);
//   m.model().eval(m.weights(), inputs, targets, ce);
//
// The configuration comes from the checkpoint's deck text (verbatim, as the
// run read it) with every resolved value of its stored configuration JSON
// applied on top as an override: `--set` overrides the training run was
// given are not in the deck text, but they are in the resolved values. It is
// validated for the world size that wrote the checkpoint (the deck's layout
// must be consistent for that many ranks); the communicator used here may be
// any size, because every rank holds the whole model.
#include <mpi.h>

#include <memory>
#include <optional>
#include <string>

#include "core/deck/config.hpp"
#include "io/checkpoint/checkpoint.hpp"
#include "model/model_config.hpp"
#include "model/parameter_store.hpp"
#include "model/stage_plan.hpp"
#include "model/transformer.hpp"

namespace exa::inference {

// The training configuration stored in a checkpoint (see the file comment).
// exa::Error naming the checkpoint when it cannot be rebuilt.
// `extra` overrides apply after the stored ones.
deck::Config config_from_checkpoint(const io::CheckpointMeta& meta, const std::vector<std::string>& extra = {});

class CheckpointModel {
 public:
  // `path`: a run directory, its ckpt/ directory or a step_<N> directory
  // (io::resolve_checkpoint). Collective over `comm`. `dropless` loads the
  // model with moe.capacity_factor = 0 (the weights do not depend on it):
  // generation wants that, since with capacity the tokens after a position
  // could influence it through expert capacity.
  CheckpointModel(const std::string& path, MPI_Comm comm, bool dropless = false);
  // Only pipeline stage `stage` of `stages` (generation through a pipeline
  // of ranks, each holding its layers' tensors alone): the layers split as
  // training splits them by default, balancing the counted FLOPs and
  // parameter bytes (parallel/pipeline/stage_split.hpp); the first stage
  // holds the embedding, the last the final norm and LM head. exa::Error
  // when the model has fewer layers than stages.
  CheckpointModel(const std::string& path, MPI_Comm comm, bool dropless, int stage, int stages);
  CheckpointModel(const CheckpointModel&) = delete;
  CheckpointModel& operator=(const CheckpointModel&) = delete;

  const deck::Config& config() const { return *config_; }
  const model::ModelConfig& model_config() const { return mcfg_; }
  const io::CheckpointMeta& meta() const { return meta_; }
  // The step directory that was read.
  const std::string& directory() const { return meta_.directory; }
  model::Transformer<float>& model() { return *model_; }
  const model::Weights<float, Device>& weights() const { return w_; }

 private:
  io::CheckpointMeta meta_;
  std::optional<deck::Config> config_;
  model::ModelConfig mcfg_;
  model::StagePlan plan_;
  std::unique_ptr<model::ParameterStore> store_;
  std::unique_ptr<model::Transformer<float>> model_;
  model::Weights<float, Device> w_;
};

}  // namespace exa::inference
