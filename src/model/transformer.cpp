#include "model/transformer.hpp"

#include <algorithm>

#include "model/parameter_store.hpp"
#include "model/transformer_impl.hpp"

namespace exa::model {

double LayerRouting::imbalance() const {
  if (routed.empty()) return 1.0;
  std::int64_t mx = 0, sum = 0;
  for (auto c : routed) {
    mx = std::max(mx, c);
    sum += c;
  }
  return sum > 0 ? static_cast<double>(mx) * static_cast<double>(routed.size()) / static_cast<double>(sum) : 1.0;
}

double ForwardResult::max_imbalance() const {
  double m = 1.0;
  for (const auto& r : routing) m = std::max(m, r.imbalance());
  return m;
}

double ForwardResult::mean_imbalance() const {
  if (routing.empty()) return 1.0;
  double s = 0;
  for (const auto& r : routing) s += r.imbalance();
  return s / static_cast<double>(routing.size());
}

namespace {
template <class Get>
Weights<float, Device> bind_store(const ModelConfig& cfg, const ParameterStore& store, Get&& get) {
  return bind_weights<float, Device>(cfg, [&](const ParamSpec& s) {
    const std::size_t i = store.index(s.name);
    EXA_REQUIRE(store.owns_whole(i),
                "the model needs whole tensors, but this rank holds elements {}..{} of the {} of the box {} of "
                "'{}' (gather the shards first)",
                store.shard(i).offset, store.shard(i).offset + store.shard(i).count, store.shard(i).box.numel(),
                box_str(store.shard(i).box), s.name);
    EXA_REQUIRE(store.spec(i).shape == s.shape, "the store's '{}' is not shaped as this model's", s.name);
    return get(i).data();
  });
}
}  // namespace

Weights<float, Device> bind_values(const ModelConfig& cfg, const ParameterStore& store) {
  return bind_store(cfg, store, [&](std::size_t i) { return store.value(i); });
}

Weights<float, Device> bind_grads(const ModelConfig& cfg, const ParameterStore& store) {
  return bind_store(cfg, store, [&](std::size_t i) { return store.grad(i); });
}

template class Transformer<float, Device>;
template class Transformer<double, Device>;

}  // namespace exa::model
