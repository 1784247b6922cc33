#pragma once
// The pipeline strategy's options (parallel/pipeline/pipeline.hpp).
#include <cstdint>
#include <string>
#include <vector>

#include "comm/communicator.hpp"

namespace exa::deck {
class Config;
}

namespace exa::parallel::pipeline {

struct PipelineOptions {
  std::string schedule = "1f1b";
  std::vector<std::int64_t> layers_per_stage;  // empty: the balanced split (stage_split.hpp)
  int virtual_stages = 1;                      // interleaved: model chunks per stage
  // parallel.microbatches: a step's micro-batches run in rounds of this
  // many, each a whole fill and drain of the pipeline (0: one round).
  int round = 0;
  // comm.backend: the stages' point-to-point channels (NCCL on CUDA builds).
  comm::Backend backend = comm::Backend::Mpi;
  // pipeline.schedule, pipeline.layers_per_stage (validated against
  // parallel.pp and model.n_layers, errors naming the deck line),
  // pipeline.virtual_stages, parallel.microbatches, comm.backend.
  static PipelineOptions from_deck(const deck::Config& cfg);
};

}  // namespace exa::parallel::pipeline
