#include "parallel/build_model.hpp"

#include "parallel/context/context_parallel.hpp"
#include "parallel/expert/expert_seams.hpp"
#include "parallel/pipeline/deferred_weights.hpp"
#include "parallel/tensor/tensor_seams.hpp"

namespace exa::parallel {

std::unique_ptr<model::StageModel<float>> build_model(const ParallelLayout& layout, model::ModelOptions opt,
                                                      std::shared_ptr<const expert::ExpertPlacement> placement) {
  const auto& cfg = layout.model();
  auto seams = model::Seams<float>::local(model::StagePlan::whole(cfg), opt.attention_tiles, cfg.attention);
  expert::use_expert_parallel(seams, layout, std::move(placement));
  // After the dispatcher: tensor parallelism wraps it when it splits the
  // experts or the sequence.
  tensor::use_tensor_parallel(seams, layout);
  context::use_context_parallel(seams, layout.grid(), layout.options().context, opt.attention_tiles);
  // After the tensor-parallel seams, so that their column/row linears are
  // the ones deferred (under sequence parallelism their operands are
  // gathered as the products are recorded: Linear::weight_operands).
  pipeline::use_deferred_weights(seams, layout.deferred_weights());
  return std::make_unique<model::StageModel<float>>(cfg, layout.plan(), std::move(seams), opt);
}

}  // namespace exa::parallel
