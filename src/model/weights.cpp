#include "model/weights.hpp"

#include "core/error.hpp"
#include "model/parameter_store.hpp"

namespace exa::model {

namespace {
template <class Get>
Weights<float, Device> bind_store(const ModelConfig& cfg, const StagePlan& plan, const ParameterStore& store,
                                  Get&& get) {
  return bind_weights<float, Device>(cfg, plan, [&](const ParamSpec& s) {
    const std::size_t i = store.index(s.name);
    const Shard& sh = store.shard(i);
    EXA_REQUIRE(sh.box == local_box(s, plan, cfg) && sh.offset == 0 && sh.count == sh.box.numel(),
                "the model needs the box {} of '{}', but this rank holds elements {}..{} of the {} of the box {} "
                "(gather the shards first)",
                box_str(local_box(s, plan, cfg)), s.name,
                sh.offset, sh.offset + sh.count, sh.box.numel(), box_str(sh.box));
    EXA_REQUIRE(store.spec(i).shape == s.shape, "the store's '{}' is not shaped as this model's", s.name);
    return get(i).data();
  });
}
}  // namespace

Weights<float, Device> bind_values(const ModelConfig& cfg, const StagePlan& plan, const ParameterStore& store) {
  return bind_store(cfg, plan, store, [&](std::size_t i) { return store.value(i); });
}

Weights<float, Device> bind_grads(const ModelConfig& cfg, const StagePlan& plan, const ParameterStore& store) {
  return bind_store(cfg, plan, store, [&](std::size_t i) { return store.grad(i); });
}

Weights<float, Device> bind_values(const ModelConfig& cfg, const ParameterStore& store) {
  return bind_values(cfg, StagePlan::whole(cfg), store);
}

Weights<float, Device> bind_grads(const ModelConfig& cfg, const ParameterStore& store) {
  return bind_grads(cfg, StagePlan::whole(cfg), store);
}

}  // namespace exa::model
