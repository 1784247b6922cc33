#include "parallel/build_model.hpp"

#include "core/error.hpp"
#include "parallel/expert/all_to_all_dispatcher.hpp"
#include "parallel/pipeline/stage_split.hpp"
#include "parallel/tensor/tensor_seams.hpp"

namespace exa::parallel {

model::StagePlan stage_plan(const model::ModelConfig& cfg, const comm::ProcessGrid& grid,
                            const std::vector<std::int64_t>& layers_per_stage, int virtual_stages) {
  const auto& s = grid.sizes();
  auto plan = model::StagePlan::whole(cfg);
  if (s.pp > 1 && virtual_stages > 1) {
    plan = model::StagePlan::interleaved(cfg, grid.coords().pp, s.pp, virtual_stages);
  } else if (s.pp > 1) {
    const auto b = pipeline::stage_boundaries(cfg, s.pp, layers_per_stage);
    const auto k = std::size_t(grid.coords().pp);
    plan = model::StagePlan::layers(cfg, b[k], b[k + 1]);
  }
  if (s.tp > 1) plan = plan.with_tensor_split(cfg, grid.coords().tp, s.tp, s.etp == 0 ? s.tp : s.etp);
  if (s.ep == 1) return plan;
  EXA_REQUIRE(cfg.n_experts % s.ep == 0,
              "build_model: moe.n_experts = {} is not divisible by parallel.ep = {}; choose ep dividing the experts",
              cfg.n_experts, s.ep);
  const std::int64_t per = cfg.n_experts / s.ep, j = grid.coords().ep;
  return plan.with_experts(j * per, (j + 1) * per);
}

std::unique_ptr<model::StageModel<float>> build_model(const model::ModelConfig& cfg, const comm::ProcessGrid& grid,
                                                      model::ModelOptions opt, ExpertComm ec, TensorComm tc,
                                                      const context::ContextOptions& co, StageSplit po) {
  auto plan = stage_plan(cfg, grid, po.layers_per_stage, po.virtual_stages);
  plan.sequence_parallel = tc.sequence_parallel && plan.tp > 1;
  auto seams = model::Seams<float>::local(model::StagePlan::whole(cfg), opt.attention_tiles);
  if (!plan.all_experts(cfg)) {
    const MPI_Comm ep = grid.comm(comm::Group::Ep);
    std::shared_ptr<comm::Communicator> counts = comm::make_mpi_communicator(ep);
    std::shared_ptr<comm::Communicator> rows =
        ec.backend == comm::Backend::Nccl ? std::shared_ptr<comm::Communicator>(comm::make_nccl_communicator(ep))
                                          : counts;
    std::shared_ptr<comm::HierarchicalComms> hier;
    if (ec.hierarchical)
      hier = std::make_shared<comm::HierarchicalComms>(comm::make_hierarchical(grid, comm::Group::Ep, ec.backend));
    seams.dispatcher = std::make_shared<AllToAllDispatcher<float>>(std::move(counts), std::move(rows),
                                                                   int(cfg.n_experts), std::move(hier), ec.placement);
  }
  if (plan.tp > 1) use_tensor_parallel_seams(seams, plan, grid, ec.backend, tc.overlap);
  context::use_context_parallel(seams, grid, co, opt.attention_tiles);
  // After the tensor-parallel seams, so that their column/row linears are
  // the ones deferred (their weight gradients need no TP collective without
  // sequence parallelism; supported_layout.cpp refuses zb with it).
  if (po.deferred_weights) {
    for (auto* l : {&seams.column, &seams.row, &seams.replicated})
      *l = std::make_shared<const pipeline::DeferredLinear>(*l, po.deferred_weights);
  }
  return std::make_unique<model::StageModel<float>>(cfg, plan, std::move(seams), opt);
}

}  // namespace exa::parallel
