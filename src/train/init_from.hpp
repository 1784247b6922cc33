#pragma once
// train.init_from: a run that starts from a trained model (fine-tuning)
// rather than the seeded initialisation (docs/architecture.md, "LoRA").
//
// The checkpoint may come from any layout (the reader reshards it); its
// model must be the deck's. Under LoRA the adapters are not in it: they
// keep their initialisation (B = 0, so step 0 is the loaded model). The
// run's own checkpoints then hold the adapters only, with the model's
// Merkle root: a resume, `examoe eval` and `examoe-generate` read the
// frozen model from train.init_from again and refuse one with another
// root.
#include <cstdint>
#include <string>
#include <vector>

#include <mpi.h>

#include "core/deck/config.hpp"
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

// Loads a checkpoint that holds adapters only (below) into `store`: the
// frozen model from `base`, the run's train.init_from, then the adapters
// from `dir`, refused unless they were trained on `base` (the Merkle root
// they record). Returns the adapter checkpoint's metadata. Collective.
io::CheckpointMeta load_adapted_model(const std::string& dir, const std::string& base, model::ParameterStore& store,
                                      const model::ModelConfig& mcfg, MPI_Comm comm);

// Whether this deck's checkpoints hold the adapters only (with their
// moments and the model's Merkle root): a LoRA run from train.init_from,
// whose frozen model that checkpoint already holds. A LoRA run on the
// seeded initialisation writes the whole model.
bool checkpoints_hold_adapters_only(const deck::Config& cfg);
// The tensors of `store` such a checkpoint holds: the trainable ones, or
// all of them.
std::vector<io::CheckpointTensor> saved_tensors(const model::ParameterStore& store, bool adapters_only);

// A 64-bit root as a /state array (four exact 16-bit halves in floats), and
// back.
io::StateArray root_to_state(std::uint64_t root);
std::uint64_t root_from_state(const io::StateArray& a);

}  // namespace exa::train
