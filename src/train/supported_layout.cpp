#include "train/supported_layout.hpp"

#include "comm/communicator.hpp"
#include "core/error.hpp"

namespace exa::train {

void require_supported_layout(const deck::Config& cfg, bool on_run_node) {
  // This build runs data, tensor, context, expert and pipeline parallelism;
  // tensor, context and pipeline compose in pairs, not all three yet.
  // Say so before any work is done.
  {
    const auto tp = cfg.get_int("parallel.tp"), cp = cfg.get_int("parallel.cp"), pp = cfg.get_int("parallel.pp");
    EXA_REQUIRE((tp > 1) + (cp > 1) + (pp > 1) <= 2,
                "{} parallel.tp = {}, parallel.cp = {} and parallel.pp = {}: tensor, context and pipeline parallelism "
                "combine in pairs (tp x cp, pp x tp, pp x cp) in this build, not all three; keep one of them at 1",
                cfg.locate({"parallel.tp", "parallel.cp", "parallel.pp"}), tp, cp, pp);
  }
  // The tied embedding's two copies (first and last stage) sum their
  // gradients whole; ZeRO would shard them differently on the two stages.
  EXA_REQUIRE(cfg.get_int("parallel.pp") == 1 || !cfg.get_bool("model.tie_embeddings") ||
                  cfg.get_int("parallel.zero") == 0,
              "{} model.tie_embeddings = true with parallel.pp = {} needs parallel.zero = 0 (got {}); untie the "
              "embeddings or set parallel.zero = 0",
              cfg.locate({"model.tie_embeddings", "parallel.pp", "parallel.zero"}), cfg.get_int("parallel.pp"),
              cfg.get_int("parallel.zero"));
  // zb defers weight gradients past a micro-batch's backward; ZeRO 2/3
  // reduce each unit's gradient right after it.
  EXA_REQUIRE(cfg.get_int("parallel.pp") == 1 || cfg.get_string("pipeline.schedule") != "zb" ||
                  cfg.get_int("parallel.zero") <= 1,
              "{} pipeline.schedule = \"zb\" needs parallel.zero <= 1 (got {}): ZeRO 2/3 reduce each layer's "
              "gradient before the deferred weight gradients are done; use parallel.zero = 0 or 1, or "
              "pipeline.schedule = \"1f1b\"",
              cfg.locate({"pipeline.schedule", "parallel.zero"}), cfg.get_int("parallel.zero"));
  // zb runs deferred weight gradients whenever a stage would wait, at times
  // each rank picks alone; under sequence parallelism those products gather
  // their rows over the TP group, a collective every TP rank must enter alike.
  EXA_REQUIRE(cfg.get_int("parallel.pp") == 1 || cfg.get_string("pipeline.schedule") != "zb" ||
                  cfg.get_int("parallel.tp") == 1 || !cfg.get_bool("parallel.sequence_parallel"),
              "{} pipeline.schedule = \"zb\" with parallel.tp = {} and parallel.sequence_parallel = true is not "
              "available: the deferred weight gradients would gather the sequence-parallel rows over the TP group "
              "at times each rank picks alone; set parallel.sequence_parallel = false or pipeline.schedule = "
              "\"1f1b\"",
              cfg.locate({"pipeline.schedule", "parallel.sequence_parallel"}), cfg.get_int("parallel.tp"));
  EXA_REQUIRE(cfg.get_string("comm.compression") == "none",
              "{} comm.compression = \"{}\" is not available in this build yet; set comm.compression = \"none\"",
              cfg.locate({"comm.compression"}), cfg.get_string("comm.compression"));
  const bool nccl = on_run_node ? comm::nccl_available() : EXAMOE_HAVE_NCCL != 0;
  EXA_REQUIRE(cfg.get_string("comm.backend") != "nccl" || nccl,
              "{} comm.backend = \"nccl\" needs a CUDA build with NCCL and a visible GPU (this build or node has "
              "none); set comm.backend = \"mpi\"",
              cfg.locate({"comm.backend"}));
  EXA_REQUIRE(cfg.get_string("precision.compute") == "fp32",
              "{} precision.compute = \"{}\" is not available in this build yet; set precision.compute = \"fp32\"",
              cfg.locate({"precision.compute"}), cfg.get_string("precision.compute"));
}

}  // namespace exa::train
