#include "parallel/pipeline/pipeline_options.hpp"

#include "core/deck/config.hpp"
#include "parallel/pipeline/stage_split.hpp"

namespace exa::parallel::pipeline {

PipelineOptions PipelineOptions::from_deck(const deck::Config& cfg) {
  PipelineOptions o;
  o.schedule = cfg.get_string("pipeline.schedule");
  o.layers_per_stage =
      parse_layers_per_stage(cfg.get_string("pipeline.layers_per_stage"), cfg.get_int("model.n_layers"),
                             static_cast<int>(cfg.get_int("parallel.pp")), cfg.locate({"pipeline.layers_per_stage"}));
  o.virtual_stages = static_cast<int>(cfg.get_int("pipeline.virtual_stages"));
  o.round = static_cast<int>(cfg.get_int("parallel.microbatches"));
  o.backend = comm::backend_named(cfg.get_string("comm.backend"));
  return o;
}

}  // namespace exa::parallel::pipeline
