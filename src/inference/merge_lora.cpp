#include "inference/merge_lora.hpp"

#include <map>
#include <vector>

#include "core/error.hpp"
#include "core/log.hpp"
#include "inference/checkpoint_model.hpp"
#include "io/checkpoint/checkpoint.hpp"
#include "model/model_config.hpp"
#include "model/parameter_specs.hpp"
#include "model/parameter_store.hpp"
#include "train/init_from.hpp"

namespace exa::inference {

namespace {

std::vector<float> host(const View1<float>& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<float>(h.data(), h.data() + h.extent(0));
}

void put(const View1<float>& v, const std::vector<float>& x) {
  auto h = Kokkos::create_mirror_view(v);
  std::copy(x.begin(), x.end(), h.data());
  Kokkos::deep_copy(v, h);
}

// w [S, out, in] += s * b [S, out, r] a [S, r, in], summed in double.
void fold(std::vector<float>& w, const std::vector<float>& a, const std::vector<float>& b,
          const std::vector<std::int64_t>& shape, std::int64_t r, double s) {
  const std::size_t k = shape.size();
  const std::int64_t out = shape[k - 2], in = shape[k - 1], S = k == 3 ? shape[0] : 1;
  for (std::int64_t e = 0; e < S; ++e)
    for (std::int64_t o = 0; o < out; ++o)
      for (std::int64_t i = 0; i < in; ++i) {
        double acc = 0;
        for (std::int64_t j = 0; j < r; ++j)
          acc += double(b[std::size_t((e * out + o) * r + j)]) * double(a[std::size_t((e * r + j) * in + i)]);
        auto& x = w[std::size_t((e * out + o) * in + i)];
        x = float(double(x) + s * acc);
      }
}

}  // namespace

std::string merge_lora(const std::string& base, const std::string& adapters, const std::string& out, MPI_Comm comm) {
  const io::CheckpointInfo info = io::inspect_checkpoint(io::resolve_checkpoint(adapters));
  const deck::Config cfg = config_from_checkpoint(info.meta);
  const model::ModelConfig mcfg = model::ModelConfig::from_deck(cfg);
  EXA_REQUIRE(mcfg.lora.enabled(), "merge-lora: {} holds no adapters (its deck has lora.rank = 0); it already is "
              "an ordinary checkpoint", info.meta.directory);
  // The adapted model in model order, whole: the frozen tensors from
  // `base` and the adapters from `adapters`, or everything from `adapters`
  // when it holds the whole model (a LoRA run on the seeded model).
  model::ParameterStore store(model::parameter_specs(mcfg));
  io::CheckpointMeta meta;
  if (train::checkpoints_hold_adapters_only(cfg)) {
    meta = train::load_adapted_model(info.meta.directory, base, store, mcfg, comm);
  } else {
    // The whole model is in the LoRA checkpoint: its frozen tensors must
    // be the base's, dataset checksum for dataset checksum.
    const io::CheckpointInfo b = io::inspect_checkpoint(io::resolve_checkpoint(base));
    std::map<std::string, std::uint64_t> sums;
    for (const auto& d : b.datasets) sums[d.path] = d.checksum;
    for (const auto& d : info.datasets) {
      if (d.path.rfind("/model/", 0) != 0 || model::is_lora_adapter(d.path)) continue;
      const auto it = sums.find(d.path);
      EXA_REQUIRE(it != sums.end() && it->second == d.checksum,
                  "merge-lora: {} of {} differs from {}'s: the adapters were not trained on that model",
                  d.path, info.meta.directory, base);
    }
    meta = io::load_checkpoint(info.meta.directory, store, nullptr, comm);
  }
  // The merged model: the deck without [lora] and without a starting point.
  const deck::Config merged_cfg = config_from_checkpoint(info.meta, {"lora.rank=0", "train.init_from=none"});
  const model::ModelConfig bcfg = model::ModelConfig::from_deck(merged_cfg);
  model::ParameterStore merged(model::parameter_specs(bcfg));
  const double s = mcfg.lora.scale();
  int folded = 0;
  for (std::size_t i = 0; i < merged.size(); ++i) {
    const auto& spec = merged.spec(i);
    auto w = host(store.value(spec.name));
    const std::string an = model::lora_a_name(spec.name);
    if (store.contains(an)) {
      fold(w, host(store.value(an)), host(store.value(model::lora_b_name(spec.name))), spec.shape, mcfg.lora.rank, s);
      ++folded;
    }
    put(merged.value(i), w);
  }
  meta.state.erase(train::kLoraBaseState);
  meta.deck = merged_cfg.to_toml();
  meta.config_json = merged_cfg.to_json();
  const std::string dir = io::save_checkpoint(out, merged, nullptr, meta, comm);
  log::info("merge-lora: {} adapters (rank {}, scale {:g}) folded into the model of {}; wrote {}", folded,
            mcfg.lora.rank, s, base, dir);
  return dir;
}

}  // namespace exa::inference
