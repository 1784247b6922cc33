#pragma once
// The routing state a checkpoint keeps besides tensors, handed to a model
// that reads the checkpoint's tensors: the aux-free router biases
// (/state/router_bias) and expert growth's clone families
// (/state/growth_family), so the model routes as training did. Used by
// evaluation and generation from a checkpoint, and by the distillation
// teacher (docs/architecture.md "Distillation").
#include "io/checkpoint/checkpoint.hpp"
#include "model/stage_model.hpp"

namespace exa::train {

// exa::Error naming the checkpoint (meta.directory) when an array does not
// fit the model `m` (whose config has the checkpoint's expert count).
void route_as_saved(const io::CheckpointMeta& meta, model::StageModel<float>& m);

}  // namespace exa::train
