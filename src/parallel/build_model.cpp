#include "parallel/build_model.hpp"

#include "core/error.hpp"
#include "parallel/expert/all_to_all_dispatcher.hpp"
#include "parallel/pipeline/stage_split.hpp"

namespace exa::parallel {

model::StagePlan stage_plan(const model::ModelConfig& cfg, const comm::ProcessGrid& grid,
                            const std::vector<std::int64_t>& layers_per_stage) {
  const auto& s = grid.sizes();
  const std::pair<const char*, int> dims[] = {{"tp", s.tp}, {"cp", s.cp}};
  for (const auto& [name, size] : dims)
    EXA_REQUIRE(size == 1, "build_model: parallel.{} = {} has no implementation in this build yet (data, expert "
                "and pipeline parallelism have); set parallel.{} = 1", name, size, name);
  auto stage = model::StagePlan::whole(cfg);
  if (s.pp > 1) {
    const auto b = pipeline::stage_boundaries(cfg, s.pp, layers_per_stage);
    const auto k = std::size_t(grid.coords().pp);
    stage = model::StagePlan::layers(cfg, b[k], b[k + 1]);
  }
  if (s.ep == 1) return stage;
  EXA_REQUIRE(cfg.n_experts % s.ep == 0,
              "build_model: moe.n_experts = {} is not divisible by parallel.ep = {}; choose ep dividing the experts",
              cfg.n_experts, s.ep);
  const std::int64_t per = cfg.n_experts / s.ep, j = grid.coords().ep;
  return stage.with_experts(j * per, (j + 1) * per);
}

std::unique_ptr<model::StageModel<float>> build_model(const model::ModelConfig& cfg, const comm::ProcessGrid& grid,
                                                      model::ModelOptions opt, ExpertComm ec,
                                                      const std::vector<std::int64_t>& layers_per_stage,
                                                      std::shared_ptr<pipeline::WeightGradQueue> deferred_weights) {
  const auto plan = stage_plan(cfg, grid, layers_per_stage);
  auto seams = model::Seams<float>::local(model::StagePlan::whole(cfg), opt.attention_tiles);
  if (deferred_weights) {
    for (auto* l : {&seams.column, &seams.row, &seams.replicated})
      *l = std::make_shared<const pipeline::DeferredLinear>(*l, deferred_weights);
  }
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
                                                                   int(cfg.n_experts), std::move(hier));
  }
  return std::make_unique<model::StageModel<float>>(cfg, plan, std::move(seams), opt);
}

}  // namespace exa::parallel
