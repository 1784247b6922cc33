#include "model/parameter_store.hpp"

#include <algorithm>
#include <type_traits>

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

ParameterStore::ParameterStore(std::vector<ParamSpec> specs, std::vector<Shard> shards, const Offload& offload)
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
  local_numel_ = total;
  allocate(offload);
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
    settle({local_offsets_[i], local_offsets_[i] + shards_[i].count});
  }
}

void ParameterStore::settle(ElementSpan s) const {
  if (value_tier_ == nullptr) return;
  for (const auto& o : offloaded_) {
    const ElementSpan in{std::max(s.begin, o.begin), std::min(s.end, o.end)};
    if (in.empty()) continue;
    offload_file_->sample();
    value_tier_->release(in);
  }
}

void ParameterStore::zero_grads() { zero_grads(0, std::int64_t(grads_.extent(0))); }

void ParameterStore::zero_grads(std::int64_t begin, std::int64_t count) {
  const std::int64_t end = begin + count;
  auto zero = [&](std::int64_t b, std::int64_t e) {
    if (e > b) Kokkos::deep_copy(Kokkos::subview(grads_, Kokkos::make_pair(std::size_t(b), std::size_t(e))), 0.0f);
  };
  std::int64_t at = begin;
  if (grad_tier_ != nullptr) {
    for (const auto& s : grad_tier_->spans()) {
      const std::int64_t b = std::max(at, s.begin), e = std::min(end, s.end);
      if (e <= b) continue;
      zero(at, b);
      Kokkos::fence();
      grad_tier_->zero({b, e});  // without bringing the span in
      grad_tier_->release({b, e});
      at = e;
    }
  }
  zero(at, end);
}

void ParameterStore::allocate(const Offload& offload) {
  const auto total = static_cast<std::size_t>(local_numel_);
  if (offload.file == nullptr) {
    values_ = Flat("exa::params", total);
    grads_ = Flat("exa::grads", static_cast<std::size_t>(trainable_numel_));  // a frozen tensor has none
    return;
  }
  // Host builds: a file-backed tier; CUDA builds: host memory
  // (core/offload_tier.hpp). Either way one flat array, as above.
  if constexpr (!std::is_same_v<Flat::memory_space, Kokkos::HostSpace> && !OffloadFile::host_memory_tier())
    throw Error("memory.offload_experts: this build's device has no offload tier (host builds offload to a file, "
                "CUDA builds to host memory): set memory.offload_experts = false");
  for (std::size_t i = 0; i < specs_.size(); ++i) {
    // One span per tensor, adjacent ones too: the pieces that the
    // optimizer, the gradient norm and zeroing take one at a time.
    if (offload.which(specs_[i]) && shards_[i].count > 0)
      offloaded_.push_back({local_offsets_[i], local_offsets_[i] + shards_[i].count});
  }
  std::vector<ElementSpan> grad_spans;
  for (auto s : offloaded_) {
    s.end = std::min(s.end, trainable_numel_);
    if (!s.empty()) grad_spans.push_back(s);
  }
  offload_file_ = offload.file;
  value_tier_ = std::make_shared<TieredBuffer>("exa::params", local_numel_, offloaded_, offload_file_);
  grad_tier_ = std::make_shared<TieredBuffer>("exa::grads", trainable_numel_, grad_spans, offload_file_);
  values_ = Flat(value_tier_->data(), total);
  grads_ = Flat(grad_tier_->data(), static_cast<std::size_t>(trainable_numel_));
}

}  // namespace exa::model
