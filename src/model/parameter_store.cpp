#include "model/parameter_store.hpp"

#include "core/error.hpp"
#include "kernels/init.hpp"

namespace exa::model {

std::vector<Shard> whole_shards(const std::vector<ParamSpec>& specs) {
  std::vector<Shard> s;
  s.reserve(specs.size());
  for (const auto& p : specs) s.push_back(Shard{0, p.numel(), whole_box(p.shape)});
  return s;
}

ParameterStore::ParameterStore(std::vector<ParamSpec> specs) : ParameterStore(specs, whole_shards(specs)) {}

ParameterStore::ParameterStore(std::vector<ParamSpec> specs, std::vector<Shard> shards)
    : specs_(std::move(specs)), shards_(std::move(shards)) {
  EXA_ASSERT(specs_.size() == shards_.size());
  std::int64_t total = 0;
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    shards_[i] = resolve_shard(shards_[i], specs_[i].name, specs_[i].shape);
    const auto& s = shards_[i];
    EXA_ASSERT(by_name_.emplace(specs_[i].name, i).second);
    local_offsets_.push_back(total);
    total += s.count;
    if (specs_[i].trainable) {
      if (trainable_numel_ != local_offsets_[i] && trainable_first_) {
        trainable_first_ = false;
        out_of_order_ = specs_[i].name;
      }
      trainable_numel_ = total;
    }
  }
  if (!trainable_first_) trainable_numel_ = 0;
  values_ = Flat("exa::params", static_cast<std::size_t>(total));
  grads_ = Flat("exa::grads", static_cast<std::size_t>(trainable_numel_));  // a frozen tensor has none
}

void ParameterStore::require_trainable_first() const {
  EXA_REQUIRE(trainable_first_, "ParameterStore: trainable tensor '{}' follows a frozen one; a store that trains "
              "(gradients, optimizer) must hold the trainable tensors first", out_of_order_);
}

ParameterStore::Flat ParameterStore::trainable_grads() const {
  return Kokkos::subview(grads_, Kokkos::make_pair(std::size_t(0), std::size_t(trainable_numel_)));
}

std::size_t ParameterStore::index(const std::string& name) const {
  auto it = by_name_.find(name);
  EXA_REQUIRE(it != by_name_.end(), "the model has no tensor named '{}'", name);
  return it->second;
}

ParameterStore::Flat ParameterStore::value(std::size_t i) const {
  const auto b = static_cast<std::size_t>(local_offsets_[i]);
  return Kokkos::subview(values_, Kokkos::make_pair(b, b + static_cast<std::size_t>(shards_[i].count)));
}

ParameterStore::Flat ParameterStore::grad(std::size_t i) const {
  if (!specs_[i].trainable) return Flat();
  require_trainable_first();
  const auto b = static_cast<std::size_t>(local_offsets_[i]);
  return Kokkos::subview(grads_, Kokkos::make_pair(b, b + static_cast<std::size_t>(shards_[i].count)));
}

void ParameterStore::initialize(std::uint64_t seed, const std::function<bool(const std::string&)>& only) {
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    const auto& p = specs_[i];
    if (only && !only(p.name)) continue;
    if (p.init == ParamSpec::Init::Ones || p.init == ParamSpec::Init::Zeros) {
      kernels::fill_constant(value(i), p.init == ParamSpec::Init::Ones ? 1.0f : 0.0f);
    } else {
      kernels::init_normal_box(value(i), seed, p.name, p.init_std, box_index(shards_[i], p.shape),
                               shards_[i].offset);
    }
  }
}

void ParameterStore::zero_grads() { Kokkos::deep_copy(grads_, 0.0f); }

}  // namespace exa::model
