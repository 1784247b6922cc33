#include "train/init_from.hpp"

#include <filesystem>

#include "core/error.hpp"
#include "core/log.hpp"

namespace exa::train {

std::uint64_t load_init_from(const std::string& path, model::ParameterStore& store, const model::ModelConfig& mcfg,
                             MPI_Comm world) {
  namespace fs = std::filesystem;
  if (!fs::exists(path))
    throw Error(fmt::format("train.init_from = \"{}\" does not exist; give a checkpoint directory (a step_* "
                            "directory, or the checkpoint.dir of the run that trained the model)", path));
  std::string step_dir;
  io::CheckpointInfo info;
  try {
    step_dir = io::resolve_checkpoint(path);
    info = io::inspect_checkpoint(step_dir);
  } catch (const Error& e) {
    throw Error(fmt::format("train.init_from = \"{}\": {}", path, e.what()));
  }
  for (const auto& d : info.datasets)
    if (model::is_lora_adapter(d.path))
      throw Error(fmt::format("train.init_from = \"{}\" holds adapters ({}): fold them into the model first "
                              "(examoe-ckpt merge-lora {} OUT) and start from OUT", path, d.path, step_dir));
  // The model the deck builds, less its adapters, must be the checkpoint's.
  std::vector<model::ParamSpec> base;
  for (const auto& s : model::parameter_specs(mcfg))
    if (!model::is_lora_adapter(s.name)) base.push_back(s);
  try {
    io::require_matching_model(info, base, false);
  } catch (const Error& e) {
    throw Error(fmt::format("train.init_from = \"{}\": {}", path, e.what()));
  }
  std::vector<io::CheckpointTensor> tensors;
  for (const auto& t : io::checkpoint_tensors(store))
    if (!model::is_lora_adapter(t.name)) tensors.push_back(t);
  try {
    io::load_checkpoint(step_dir, tensors, nullptr, world);
  } catch (const Error& e) {
    throw Error(fmt::format("train.init_from = \"{}\": {}", path, e.what()));
  }
  log::info("init_from: the model of {} (step {}, Merkle root {:016x}){}", step_dir, info.meta.step,
            info.meta.merkle_root, mcfg.lora.enabled() ? ", frozen under the adapters" : "");
  return info.meta.merkle_root;
}

io::CheckpointMeta load_adapted_model(const std::string& dir, const std::string& base, model::ParameterStore& store,
                                      const model::ModelConfig& mcfg, MPI_Comm comm) {
  const std::uint64_t root = load_init_from(base, store, mcfg, comm);
  io::CheckpointMeta meta = io::load_checkpoint(dir, saved_tensors(store, true), nullptr, comm);
  const auto it = meta.state.find(kLoraBaseState);
  EXA_REQUIRE(it != meta.state.end(), "checkpoint {} holds adapters but not the Merkle root of the model they "
              "adapt (/state/{}); it was not written by an ExaMoE LoRA run", dir, kLoraBaseState);
  EXA_REQUIRE(root_from_state(it->second) == root,
              "checkpoint {} adapts the model with Merkle root {:016x}, but {} holds root {:016x}: not the model "
              "the adapters were trained on. Give the checkpoint its train.init_from (as it was when it trained)",
              dir, root_from_state(it->second), base, root);
  return meta;
}

bool checkpoints_hold_adapters_only(const deck::Config& cfg) {
  return cfg.get_int("lora.rank") > 0 && cfg.get_string("train.init_from") != "none";
}

std::vector<io::CheckpointTensor> saved_tensors(const model::ParameterStore& store, bool adapters_only) {
  std::vector<io::CheckpointTensor> out;
  const auto all = io::checkpoint_tensors(store);
  for (std::size_t i = 0; i < all.size(); ++i)
    if (!adapters_only || store.spec(i).trainable) out.push_back(all[i]);
  return out;
}

io::StateArray root_to_state(std::uint64_t root) {
  io::StateArray a;
  a.shape = {4};
  for (int k = 0; k < 4; ++k) a.values.push_back(float((root >> (16 * k)) & 0xffffu));
  return a;
}

std::uint64_t root_from_state(const io::StateArray& a) {
  EXA_REQUIRE(a.values.size() == 4, "checkpoint: /state/{} holds {} values, not 4", kLoraBaseState, a.values.size());
  std::uint64_t r = 0;
  for (int k = 0; k < 4; ++k) r |= std::uint64_t(a.values[std::size_t(k)]) << (16 * k);
  return r;
}

}  // namespace exa::train
