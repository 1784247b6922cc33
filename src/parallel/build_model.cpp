#include "parallel/build_model.hpp"

#include "core/error.hpp"

namespace exa::parallel {

model::StagePlan stage_plan(const model::ModelConfig& cfg, const comm::ProcessGrid& grid) {
  const auto& s = grid.sizes();
  const std::pair<const char*, int> dims[] = {{"tp", s.tp}, {"pp", s.pp}, {"cp", s.cp}, {"ep", s.ep}};
  for (const auto& [name, size] : dims)
    EXA_REQUIRE(size == 1, "build_model: parallel.{} = {} has no implementation in this build yet (only data "
                "parallelism has); set parallel.{} = 1", name, size, name);
  return model::StagePlan::whole(cfg);
}

std::unique_ptr<model::StageModel<float>> build_model(const model::ModelConfig& cfg, const comm::ProcessGrid& grid,
                                                      model::ModelOptions opt) {
  const auto plan = stage_plan(cfg, grid);
  return std::make_unique<model::StageModel<float>>(cfg, plan,
                                                    model::Seams<float>::local(plan, opt.attention_tiles), opt);
}

}  // namespace exa::parallel
