#include "model/expert_offload.hpp"

#include <Kokkos_Core.hpp>
#include <algorithm>

#include "core/error.hpp"

namespace exa::model {

bool is_routed_expert(const ParamSpec& s) { return s.ep_dim == 0 && !is_lora_adapter(s.name); }

ExpertOffload::ExpertOffload(const ParameterStore& store, std::int64_t n_layers, int depth)
    : store_(store), depth_(depth) {
  EXA_ASSERT(depth >= 1 && store.value_tier() != nullptr);
  const int units = n_units(n_layers);
  tensors_.resize(std::size_t(units));
  used_.resize(std::size_t(units));
  routed_.resize(std::size_t(units));
  fetched_.assign(std::size_t(units), false);
  for (std::size_t i = 0; i < store.size(); ++i) {
    const auto& s = store.spec(i);
    if (!is_routed_expert(s) || store.shard(i).count == 0) continue;
    const auto& sh = store.shard(i);
    // Whole boxes (ZeRO 0, the only stage that installs this hook): expert
    // e is the e-th equal run of the box.
    EXA_ASSERT(sh.count == sh.box.numel());
    const std::int64_t experts = sh.box.extent.empty() ? 1 : sh.box.extent[0];
    tensors_[std::size_t(unit_of(s.name, n_layers))].push_back(
        {{store.local_offset(i), store.local_offset(i) + sh.count}, experts});
    if (experts > 0) expert_bytes_ += sh.count / experts * std::int64_t(sizeof(float));
  }
  // expert_bytes_ summed every layer's; one expert's is a layer's share.
  int moe_units = 0;
  for (const auto& t : tensors_) moe_units += t.empty() ? 0 : 1;
  if (moe_units > 0) expert_bytes_ /= moe_units;
  thread_ = std::thread([this] { worker(); });
}

ExpertOffload::~ExpertOffload() {
  {
    std::lock_guard<std::mutex> lock(mutex_);
    stop_ = true;
    queue_.clear();
  }
  wake_.notify_all();
  thread_.join();
}

void ExpertOffload::worker() {
  for (;;) {
    Job job;
    {
      std::unique_lock<std::mutex> lock(mutex_);
      wake_.wait(lock, [&] { return stop_ || !queue_.empty(); });
      if (stop_) return;
      job = std::move(queue_.front());
      queue_.pop_front();
      running_ = job.unit;
    }
    for (const auto& s : job.values) store_.value_tier()->touch(s);
    for (const auto& s : job.grads) store_.grad_tier()->touch(s);
    {
      std::lock_guard<std::mutex> lock(mutex_);
      running_ = -1;
    }
    done_.notify_all();
  }
}

ExpertOffload::Job ExpertOffload::spans_of(int unit, const std::vector<std::uint8_t>& used,
                                           const std::vector<std::uint8_t>& skip, bool grads) const {
  Job job{unit, {}, {}};
  const std::int64_t trainable = store_.trainable_numel();
  for (const auto& t : tensors_[std::size_t(unit)]) {
    const std::int64_t per = t.experts > 0 ? t.span.size() / t.experts : 0;
    for (std::int64_t e = 0; e < t.experts && e < std::int64_t(used.size()); ++e) {
      if (!used[std::size_t(e)] || (e < std::int64_t(skip.size()) && skip[std::size_t(e)])) continue;
      const ElementSpan s{t.span.begin + e * per, t.span.begin + (e + 1) * per};
      job.values.push_back(s);
      if (grads && s.end <= trainable) job.grads.push_back(s);
    }
  }
  return job;
}

void ExpertOffload::prefetch(int unit) {
  if (unit < 0 || unit >= int(tensors_.size()) || fetched_[std::size_t(unit)]) return;
  const auto& used = used_[std::size_t(unit)];
  if (tensors_[std::size_t(unit)].empty() || used.empty()) return;
  Job job = spans_of(unit, used, {}, /*grads=*/true);
  fetched_[std::size_t(unit)] = true;
  {
    std::lock_guard<std::mutex> lock(mutex_);
    queue_.push_back(std::move(job));
  }
  wake_.notify_one();
}

void ExpertOffload::cancel(int unit) {
  std::unique_lock<std::mutex> lock(mutex_);
  queue_.erase(std::remove_if(queue_.begin(), queue_.end(), [&](const Job& j) { return unit < 0 || j.unit == unit; }),
               queue_.end());
  done_.wait(lock, [&] { return running_ < 0 || (unit >= 0 && running_ != unit); });
}

void ExpertOffload::release_unit(int unit, bool grads) {
  cancel(unit);
  const std::int64_t trainable = store_.trainable_numel();
  for (const auto& t : tensors_[std::size_t(unit)]) {
    store_.value_tier()->release(t.span);
    if (grads && t.span.end <= trainable) store_.grad_tier()->release(t.span);
  }
  fetched_[std::size_t(unit)] = false;
}

void ExpertOffload::experts_routed(int unit, const std::vector<std::uint8_t>& used) {
  // Host builds: the products' page faults bring exactly these in, spread
  // over the threads that run them. The device tier's kernels would read
  // them over the bus instead, once per product: bring them now.
  if constexpr (!OffloadFile::host_memory_tier()) return;
  if (unit < 0 || unit >= int(tensors_.size()) || tensors_[std::size_t(unit)].empty()) return;
  auto& got = routed_[std::size_t(unit)];
  const Job job = spans_of(unit, used, got, /*grads=*/false);
  got.resize(std::max(got.size(), used.size()), 0);
  for (std::size_t e = 0; e < used.size(); ++e) got[e] = std::uint8_t(got[e] | used[e]);
  for (const auto& s : job.values) store_.value_tier()->touch(s);
  if (!job.values.empty()) store_.value_tier()->wait_touches();
}

void ExpertOffload::after_forward(int unit, const std::vector<std::uint8_t>& used) {
  if (unit < 0 || unit >= int(tensors_.size()) || tensors_[std::size_t(unit)].empty()) return;
  routed_[std::size_t(unit)].clear();
  used_[std::size_t(unit)] = used;
  max_used_ = std::max(max_used_, int(std::count(used.begin(), used.end(), std::uint8_t(1))));
  store_.offload_file()->sample();
  release_unit(unit, /*grads=*/false);
}

void ExpertOffload::before_backward(int unit) {
  // This layer and the next depth - 1 that backward reaches (lower units).
  for (int k = 0; k < depth_; ++k) prefetch(unit - k);
}

void ExpertOffload::after_backward(int unit) {
  if (unit < 0 || unit >= int(tensors_.size()) || tensors_[std::size_t(unit)].empty()) return;
  store_.offload_file()->sample();
  release_unit(unit, /*grads=*/true);
}

void ExpertOffload::release_all() {
  cancel(-1);
  store_.offload_file()->release_all();
  std::fill(fetched_.begin(), fetched_.end(), false);
}

}  // namespace exa::model
