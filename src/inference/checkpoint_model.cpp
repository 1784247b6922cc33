#include "inference/checkpoint_model.hpp"

#include "train/init_from.hpp"
#include "train/saved_routing.hpp"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <vector>

#include "core/deck/schema.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "model/growth_schedule.hpp"
#include "model/parameter_specs.hpp"
#include "model/precision.hpp"
#include "model/weights.hpp"
#include "parallel/pipeline/stage_split.hpp"

namespace exa::inference {

namespace {

// "section.key=value" for every resolved value the schema still knows.
std::vector<std::string> overrides_from_json(const std::string& json_text, const std::string& where) {
  std::vector<std::string> out;
  if (json_text.empty()) return out;
  nlohmann::json j;
  try {
    j = nlohmann::json::parse(json_text);
  } catch (const nlohmann::json::exception& e) {
    throw Error(fmt::format("{}: the stored configuration (attribute config_json) is not valid JSON: {}", where,
                            e.what()));
  }
  EXA_REQUIRE(j.is_object(), "{}: the stored configuration (attribute config_json) is not a JSON object", where);
  for (const auto& [section, keys] : j.items()) {
    if (!keys.is_object()) continue;
    for (const auto& [key, value] : keys.items()) {
      if (section == "data" && key == "streams") continue;  // [[data.streams]]: in the stored deck itself
      if (!deck::find_key(section, key)) {
        log::warn("{}: the stored configuration sets {}.{}, which this ExaMoE does not know; ignored", where,
                  section, key);
        continue;
      }
      std::string text;
      if (value.is_string()) {
        text = value.get<std::string>();
      } else if (value.is_boolean() || value.is_number()) {
        text = value.dump();  // shortest round-trip form for floats
      } else {
        continue;
      }
      out.push_back(section + "." + key + "=" + text);
    }
  }
  return out;
}

}  // namespace

deck::Config config_from_checkpoint(const io::CheckpointMeta& meta, const std::vector<std::string>& extra) {
  const std::string where = meta.directory.empty() ? std::string("checkpoint") : meta.directory;
  EXA_REQUIRE(!meta.deck.empty() || !meta.config_json.empty(),
              "{} stores no deck (attribute deck) and no configuration (attribute config_json), so its model "
              "cannot be rebuilt; it was not written by `examoe` training",
              where);
  auto overrides = overrides_from_json(meta.config_json, where);
  overrides.insert(overrides.end(), extra.begin(), extra.end());
  const int world = static_cast<int>(std::max<std::int64_t>(1, meta.layout.world_size));
  try {
    return deck::Config::from_text(meta.deck, where + "/deck", overrides, world);
  } catch (const Error& e) {
    throw Error(fmt::format("cannot rebuild the model of checkpoint {} from its stored deck: {}", where, e.what()));
  }
}

namespace {

// The products run in the precision the checkpoint was trained in; where
// this build cannot (a bf16 run read on a GPU build), in fp32, which reads
// the same fp32 masters, and the log says so.
void use_training_precision(const deck::Config& cfg) {
  try {
    model::use_deck_precision(cfg);
  } catch (const Error& e) {
    kernels::set_matmul_precision(kernels::MatmulPrecision::fp32);
    log::warn("evaluating in fp32 instead of the training run's precision: {}", e.what());
  }
}

}  // namespace

CheckpointModel::CheckpointModel(const std::string& path, MPI_Comm comm, bool dropless)
    : CheckpointModel(path, comm, dropless, 0, 1) {}

CheckpointModel::CheckpointModel(const std::string& path, MPI_Comm comm, bool dropless, int stage, int stages) {
  // Rank-local metadata read (every rank sees the same files, so all succeed
  // or fail alike); the tensors are then read collectively.
  meta_ = io::inspect_checkpoint(path).meta;
  config_.emplace(config_from_checkpoint(meta_));
  mcfg_ = model::model_config_at(*config_, std::int64_t(meta_.step));  // expert growth: the step's experts
  use_training_precision(*config_);
  if (dropless) mcfg_.capacity_factor = 0.0;
  EXA_REQUIRE(stages >= 1 && stage >= 0 && stage < stages, "CheckpointModel: stage {} is not one of {}", stage,
              stages);
  EXA_REQUIRE(stages <= mcfg_.n_layers,
              "checkpoint {} holds a model of {} layers, which cannot be split over {} pipeline stages: use at "
              "most {}",
              meta_.directory, mcfg_.n_layers, stages, mcfg_.n_layers);
  auto specs = model::parameter_specs(mcfg_);
  if (stages == 1) {
    plan_ = model::StagePlan::whole(mcfg_);
    store_ = std::make_unique<model::ParameterStore>(std::move(specs));
  } else {
    const auto bounds = parallel::pipeline::stage_boundaries(mcfg_, stages, {});
    plan_ = model::StagePlan::layers(mcfg_, bounds[std::size_t(stage)], bounds[std::size_t(stage) + 1]);
    // Another stage's tensors get empty boxes: nothing of them is read.
    std::vector<model::Shard> shards;
    for (const auto& spec : specs) {
      const model::Box box = model::local_box(spec, plan_, mcfg_);
      shards.push_back(model::Shard{0, box.numel(), box});
    }
    store_ = std::make_unique<model::ParameterStore>(std::move(specs), std::move(shards));
  }
  const std::string dir = meta_.directory;
  // A LoRA run from train.init_from saved its adapters only: the frozen
  // model comes from that checkpoint.
  meta_ = train::checkpoints_hold_adapters_only(*config_)
              ? train::load_adapted_model(dir, config_->get_string("train.init_from"), *store_, mcfg_, comm)
              : io::load_checkpoint(dir, *store_, nullptr, comm);
  model_ = stages == 1 ? std::make_unique<model::Transformer<float>>(mcfg_)
                       : std::make_unique<model::Transformer<float>>(mcfg_, plan_);
  w_ = model::bind_values(mcfg_, plan_, *store_);
  // Trained with aux-loss-free balancing or grown: route as training did.
  train::route_as_saved(meta_, *model_);
}

}  // namespace exa::inference
