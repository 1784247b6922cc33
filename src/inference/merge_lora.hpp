#pragma once
// examoe-ckpt merge-lora: folds a LoRA run's adapters into the model they
// adapt (docs/architecture.md, "LoRA"), W <- W + (alpha / r) B A for every
// adapted projection, and writes the result as an ordinary checkpoint of
// the model without [lora]: `examoe eval`, `examoe-generate` and
// train.init_from take it like any other.
#include <string>

#include <mpi.h>

namespace exa::inference {

// `base`: the model the adapters were trained on (its checkpoint, any
// layout); `adapters`: the LoRA run's checkpoint; `out`: the checkpoint
// directory to write into (a step_<N> directory of the adapters' step).
// The adapters' record of the base (its Merkle root, or for a checkpoint
// holding the whole model the frozen tensors' checksums) must match `base`.
// Returns the step directory written. One rank.
std::string merge_lora(const std::string& base, const std::string& adapters, const std::string& out, MPI_Comm comm);

}  // namespace exa::inference
