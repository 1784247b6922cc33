#pragma once
// train.init_from: a run that starts from a trained model (fine-tuning)
// rather than the seeded initialisation (docs/architecture.md, "LoRA").
//
// The checkpoint may come from any layout (the reader reshards it); its
// model must be the deck's. Under LoRA the adapters are not in it: they
// keep their initialisation (B = 0, so step 0 is the loaded model), and
// the checkpoint's Merkle root is recorded in the run's own checkpoints,
// so that a resume with another train.init_from is refused.
#include <cstdint>
#include <string>

#include <mpi.h>

#include "io/checkpoint/checkpoint.hpp"
#include "model/model_config.hpp"
#include "model/parameter_store.hpp"

namespace exa::train {

// /state dataset naming the model a LoRA run adapts: its Merkle root.
inline constexpr const char* kLoraBaseState = "lora_base_root";

// Loads the tensors of `store` that are not adapters from the checkpoint at
// `path` (a step directory, or a checkpoint dir whose newest complete step
// is taken); collective over `world`. Returns the checkpoint's Merkle root.
// exa::Error naming train.init_from and the fix when the checkpoint is
// missing, damaged, of another model, or itself holds adapters.
std::uint64_t load_init_from(const std::string& path, model::ParameterStore& store, const model::ModelConfig& mcfg,
                             MPI_Comm world);

// A 64-bit root as a /state array (four exact 16-bit halves in floats), and
// back.
io::StateArray root_to_state(std::uint64_t root);
std::uint64_t root_from_state(const io::StateArray& a);

}  // namespace exa::train
