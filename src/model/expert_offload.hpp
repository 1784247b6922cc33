#pragma once
// ExpertOffload: which offloaded expert pages are resident when
// (memory.offload_experts; docs/architecture.md, "Expert offload"). The
// store's routed-expert tensors live in the rank's offload file
// (ParameterStore::Offload); under ZeRO 0 this hook, run at the model's unit boundaries,
// keeps in memory only the experts a layer is using:
//
//   forward   a layer's experts fault in as its grouped products first read
//             them, and only the experts that received rows do: the others
//             are never touched. On CUDA builds, where a kernel would read
//             a host-resident expert over the bus instead, they are
//             prefetched to the device once the routing has chosen them
//             (experts_routed), before the products run. After the layer
//             they leave the resident set, and the layer reports which
//             experts it used.
//   backward  before layer l's backward, the used experts of layers
//             l, l-1, ..., l-depth+1 (their weights and gradients) are
//             brought in by a prefetch thread, so the reads of the next
//             layers overlap this one's compute. After layer l's backward
//             they leave the resident set.
//   step      the optimizer, the gradient norm and zeroing go piece by
//             piece (optim::AdamW, optim::GradClipper, ParameterStore),
//             and release_all() empties the tier after anything else that
//             swept the whole store (a checkpoint, evaluation, a load).
//
// None of this changes a value: the hook moves pages, the arithmetic and
// its order are the resident run's, so the losses are equal bit for bit.
// Each boundary also samples the resident bytes into the memory ledger.
#include <condition_variable>
#include <cstdint>
#include <deque>
#include <mutex>
#include <thread>
#include <vector>

#include "model/parameter_store.hpp"
#include "model/unit_hooks.hpp"

namespace exa::model {

// A routed expert tensor (experts/ of a MoE layer), the tensors
// memory.offload_experts moves; their LoRA adapters and the shared experts
// stay resident.
bool is_routed_expert(const ParamSpec& s);

class ExpertOffload final : public UnitHooks {
 public:
  // `store` holds its experts' whole boxes offloaded (ZeRO 0,
  // ParameterStore::Offload); `depth` >= 1 is
  // memory.offload_prefetch, the layers brought in ahead in backward.
  ExpertOffload(const ParameterStore& store, std::int64_t n_layers, int depth);
  ~ExpertOffload() override;
  ExpertOffload(const ExpertOffload&) = delete;
  ExpertOffload& operator=(const ExpertOffload&) = delete;

  void experts_routed(int unit, const std::vector<std::uint8_t>& used) override;
  void after_forward(int unit, const std::vector<std::uint8_t>& experts_used) override;
  void before_backward(int unit) override;
  void after_backward(int unit) override;

  // Every offloaded page out of the resident set (prefetches cancelled).
  void release_all();

  int depth() const { return depth_; }
  // One routed expert's bytes (values) on this rank, and the most experts
  // of one layer used in a forward so far.
  std::int64_t expert_bytes() const { return expert_bytes_; }
  int max_used_per_layer() const { return max_used_; }

 private:
  // One offloaded tensor: its span in the store and its local experts.
  struct Tensor {
    ElementSpan span;
    std::int64_t experts = 0;
  };
  struct Job {
    int unit;
    std::vector<ElementSpan> values, grads;
  };
  void prefetch(int unit);
  // The value spans (and, with `grads`, gradient spans) of unit's experts
  // marked in `used` and not in `skip` (either may be shorter than the
  // unit's experts: the rest count as unmarked).
  Job spans_of(int unit, const std::vector<std::uint8_t>& used, const std::vector<std::uint8_t>& skip,
               bool grads) const;
  // Waits until no prefetch of `unit` is queued or running.
  void cancel(int unit);
  void release_unit(int unit, bool grads);
  void worker();

  const ParameterStore& store_;
  int depth_;
  std::vector<std::vector<Tensor>> tensors_;      // by unit
  std::vector<std::vector<std::uint8_t>> used_;    // by unit: the last forward's
  std::vector<bool> fetched_;                      // by unit: prefetched in this backward
  std::vector<std::vector<std::uint8_t>> routed_;  // by unit: brought in by experts_routed in this forward
  std::int64_t expert_bytes_ = 0;
  int max_used_ = 0;

  std::mutex mutex_;
  std::condition_variable wake_, done_;
  std::deque<Job> queue_;
  int running_ = -1;
  bool stop_ = false;
  std::thread thread_;
};

}  // namespace exa::model
