#include "parallel/layout.hpp"

#include "core/deck/config.hpp"
#include "core/error.hpp"
#include "parallel/pipeline/stage_split.hpp"

namespace exa::parallel {

model::StagePlan stage_plan_of(const model::ModelConfig& cfg, const comm::GridSizes& s, const comm::GridCoords& at,
                               const pipeline::PipelineOptions& po, bool sequence_parallel) {
  auto plan = model::StagePlan::whole(cfg);
  if (s.pp > 1 && po.virtual_stages > 1) {
    plan = model::StagePlan::interleaved(cfg, at.pp, s.pp, po.virtual_stages);
  } else if (s.pp > 1) {
    const auto b = pipeline::stage_boundaries(cfg, s.pp, po.layers_per_stage);
    const auto k = std::size_t(at.pp);
    plan = model::StagePlan::layers(cfg, b[k], b[k + 1]);
  }
  if (s.tp > 1) plan = plan.with_tensor_split(cfg, at.tp, s.tp, s.etp == 0 ? s.tp : s.etp);
  plan.sequence_parallel = sequence_parallel && plan.tp > 1;
  if (s.ep == 1) return plan;
  EXA_REQUIRE(cfg.n_experts % s.ep == 0,
              "layout: moe.n_experts = {} is not divisible by parallel.ep = {}; choose ep dividing the experts",
              cfg.n_experts, s.ep);
  const std::int64_t per = cfg.n_experts / s.ep, j = at.ep;
  return plan.with_experts(j * per, (j + 1) * per);
}

LayoutOptions LayoutOptions::from_deck(const deck::Config& cfg) {
  LayoutOptions o;
  o.data = data::DataParallelOptions::from_deck(cfg);
  o.expert = {o.data.backend, cfg.get_bool("comm.hierarchical_a2a"),
              kernels::WireCodec(kernels::wire_format_from_name(cfg.get_string("comm.a2a_compression")),
                                 cfg.get_int("comm.quant_block")),
              int(cfg.get_int("moe.a2a_chunks"))};
  o.tensor = {o.data.overlap, cfg.get_bool("parallel.sequence_parallel")};
  o.context = context::ContextOptions::from_deck(cfg);
  o.pipeline = pipeline::PipelineOptions::from_deck(cfg);
  return o;
}

ParallelLayout::ParallelLayout(comm::ProcessGrid grid, const model::ModelConfig& model, LayoutOptions opt)
    : ParallelLayout(std::make_shared<const comm::ProcessGrid>(std::move(grid)), model, std::move(opt)) {}

ParallelLayout::ParallelLayout(std::shared_ptr<const comm::ProcessGrid> grid, const model::ModelConfig& model,
                               LayoutOptions opt)
    : grid_(std::move(grid)),
      model_(model),
      opt_(std::move(opt)),
      plan_(stage_plan_of(model_, grid_->sizes(), grid_->coords(), opt_.pipeline, opt_.tensor.sequence_parallel)) {
  if (pipelined() && opt_.pipeline.schedule == "zb") deferred_ = std::make_shared<pipeline::WeightGradQueue>();
}

ParallelLayout ParallelLayout::with_model(const model::ModelConfig& model) const {
  return ParallelLayout(grid_, model, opt_);
}

ParallelLayout ParallelLayout::from_deck(const deck::Config& cfg, MPI_Comm world) {
  return ParallelLayout(comm::ProcessGrid::from_deck(cfg, world), model::ModelConfig::from_deck(cfg),
                LayoutOptions::from_deck(cfg));
}

}  // namespace exa::parallel
