#include "train/supported_layout.hpp"

#include "comm/communicator.hpp"
#include "core/error.hpp"

namespace exa::train {

void require_supported_layout(const deck::Config& cfg, bool on_run_node) {
  // This build runs data, tensor, context and expert parallelism; pipeline
  // parallelism comes with its own work. Say so before any work is done.
  for (const char* k : {"parallel.pp"}) {
    EXA_REQUIRE(cfg.get_int(k) == 1,
                "{} {} = {} is not available in this build yet (data, tensor, context and expert parallelism are); "
                "set {} = 1",
                cfg.locate({k}), k, cfg.get_int(k), k);
  }
  EXA_REQUIRE(cfg.get_int("parallel.tp") == 1 || cfg.get_int("parallel.cp") == 1,
              "{} parallel.tp = {} with parallel.cp = {} is not available together in this build yet (each works "
              "alone and with dp and ep); set one of them to 1",
              cfg.locate({"parallel.tp", "parallel.cp"}), cfg.get_int("parallel.tp"), cfg.get_int("parallel.cp"));
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
