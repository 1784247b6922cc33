#include "train/supported_layout.hpp"

#include "comm/communicator.hpp"
#include "core/error.hpp"

namespace exa::train {

void require_supported_layout(const deck::Config& cfg, bool on_run_node) {
  // Everything the deck alone decides was checked when it was loaded
  // (core/deck/deck_checks.cpp); what is left depends on the build's
  // libraries and the node's devices.
  const bool nccl = on_run_node ? comm::nccl_available() : EXAMOE_HAVE_NCCL != 0;
  EXA_REQUIRE(cfg.get_string("comm.backend") != "nccl" || nccl,
              "{} comm.backend = \"nccl\" needs a CUDA build with NCCL and a visible GPU (this build or node has "
              "none); set comm.backend = \"mpi\"",
              cfg.locate({"comm.backend"}));
}

}  // namespace exa::train
