#pragma once
// ParallelLayout: the deck's parallel layout on this rank, built once
// (docs/architecture.md, "Layout and the step executor"). It holds the
// process grid, this rank's stage plan (its layers, tensor-parallel part
// and experts; the only place the plan is made) and every strategy's
// options. DataParallel, build_model and make_step_executor all take it,
// so they cannot disagree about which tensors a rank holds. (Not named
// Layout: exa::Layout is the Kokkos memory layout every View names.)
//
// The zero-bubble schedule's weight-gradient queue lives here too: the
// model's deferred Linear seams fill it and the pipeline executor drains
// it, and both are built from the layout.
#include <mpi.h>

#include <cstdint>
#include <memory>

#include "comm/hierarchical.hpp"
#include "comm/process_grid.hpp"
#include "model/activation_context.hpp"
#include "model/model_config.hpp"
#include "model/stage_plan.hpp"
#include "parallel/context/context_parallel.hpp"
#include "kernels/wire_codec.hpp"
#include "parallel/data/data_parallel_options.hpp"
#include "parallel/pipeline/deferred_weights.hpp"
#include "parallel/pipeline/pipeline_options.hpp"

namespace exa::deck {
class Config;
}

namespace exa::parallel {

// How the expert all-to-all moves token rows: `backend` (the counts always
// use MPI) and, with `hierarchical` (comm.hierarchical_a2a), in two stages
// over the Ep group's node-local and inter-node communicators.
struct ExpertOptions {
  comm::Backend backend = comm::Backend::Mpi;
  bool hierarchical = false;
  kernels::WireCodec compression;  // comm.a2a_compression: the token rows' wire format
  int chunks = 1;                  // moe.a2a_chunks: parts of each exchange, overlapped with the experts
};

// Tensor parallelism: `overlap` (comm.overlap) runs the column-parallel
// weight-gradient GEMMs during their input-gradient allreduce; its
// collectives use comm.backend (data.backend).
struct TensorOptions {
  bool overlap = true;
  bool sequence_parallel = false;  // parallel.sequence_parallel (with tp > 1)
};

struct LayoutOptions {
  data::DataParallelOptions data;
  ExpertOptions expert;
  TensorOptions tensor;
  context::ContextOptions context;
  pipeline::PipelineOptions pipeline;
  // Every key above, read from the deck (errors name the deck line).
  static LayoutOptions from_deck(const deck::Config& cfg);
};

// The plan of the rank at `at` in a grid of `sizes`: its stage's layers
// (`layers_per_stage` counts, or the balanced split when empty; v chunks
// when interleaved), its part of every tensor-parallel dimension and its
// E/ep experts. Needs no MPI: the planner (src/plan/) sizes ranks of grids
// it never builds with the same function the layout uses.
model::StagePlan stage_plan_of(const model::ModelConfig& cfg, const comm::GridSizes& sizes,
                               const comm::GridCoords& at, const pipeline::PipelineOptions& po,
                               bool sequence_parallel);

class ParallelLayout {
 public:
  // exa::Error naming the dimension when ep does not divide the experts, tp
  // an extent it splits, or the pipeline split the layers.
  ParallelLayout(comm::ProcessGrid grid, const model::ModelConfig& model, LayoutOptions opt = {});
  // The deck's [parallel], [pipeline] and [comm] over `world`.
  static ParallelLayout from_deck(const deck::Config& cfg, MPI_Comm world);
  // The same grid and options for another model (expert growth: more
  // experts); the grid's communicators are shared, not rebuilt.
  ParallelLayout with_model(const model::ModelConfig& model) const;

  const comm::ProcessGrid& grid() const { return *grid_; }
  const model::ModelConfig& model() const { return model_; }
  // This rank's layers (its stage; its chunks when interleaved), its
  // tensor-parallel part and its experts.
  const model::StagePlan& plan() const { return plan_; }
  const LayoutOptions& options() const { return opt_; }
  bool pipelined() const { return grid_->sizes().pp > 1; }
  // The rows of a micro-batch of `micro_batch` sequences on this rank: its
  // zigzag share T/cp of each sequence.
  model::MicroBatchShape micro_batch_shape(std::int64_t micro_batch) const {
    return {micro_batch, model_.seq_len / grid_->sizes().cp};
  }
  // pipeline.schedule = "zb" with pp > 1: the queue of deferred weight
  // gradients; null otherwise.
  const std::shared_ptr<pipeline::WeightGradQueue>& deferred_weights() const { return deferred_; }

 private:
  ParallelLayout(std::shared_ptr<const comm::ProcessGrid> grid, const model::ModelConfig& model, LayoutOptions opt);

  std::shared_ptr<const comm::ProcessGrid> grid_;  // shared by with_model's layouts
  model::ModelConfig model_;
  LayoutOptions opt_;
  model::StagePlan plan_;
  std::shared_ptr<pipeline::WeightGradQueue> deferred_;
};

}  // namespace exa::parallel
