#include "model/weights.hpp"

#include "core/error.hpp"
#include "model/parameter_store.hpp"

namespace exa::model {

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

}  // namespace exa::model
