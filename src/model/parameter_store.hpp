#pragma once
// ParameterStore: every model tensor by global name and global shape, and
// the piece of it this rank owns.
//
// A rank's piece of a tensor is a model::Shard (model/shard.hpp): a box of
// the global tensor (set by tensor and expert parallelism) and a contiguous
// range [offset, offset + count) of the box's row-major order (set by ZeRO).
// With one rank it is the whole tensor; the checkpoint writes each piece as
// hyperslabs of the global dataset, so every layout reads and writes the
// same files.
//
// Values and gradients of all local slices live in two flat fp32 buffers
// (one allocation each, in spec order) so that the optimizer, gradient
// norms and gradient buckets can treat them as a single array.
#include <functional>
#include <string>
#include <unordered_map>
#include <vector>

#include "core/offload_tier.hpp"
#include "core/types.hpp"
#include "model/parameter_specs.hpp"
#include "model/shard.hpp"

namespace exa::model {

class ParameterStore {
 public:
  using Flat = View1<float>;

  // Whole tensors on this rank (single-rank layout).
  explicit ParameterStore(std::vector<ParamSpec> specs);
  // Explicit pieces, one per spec (the parallel layouts). A shard without a
  // box is of the whole tensor; exa::Error naming the tensor when a box or
  // range does not fit it.
  // memory.offload_experts (core/offload_tier.hpp): with `offload`, the
  // values and gradients of the tensors offload.which picks live in
  // offload.file's tier.
  struct Offload {
    std::shared_ptr<OffloadFile> file;  // null: nothing offloaded
    std::function<bool(const ParamSpec&)> which;
  };
  ParameterStore(std::vector<ParamSpec> specs, std::vector<Shard> shards, const Offload& offload = {});

  std::size_t size() const { return specs_.size(); }
  const ParamSpec& spec(std::size_t i) const { return specs_[i]; }
  const std::vector<ParamSpec>& specs() const { return specs_; }
  // Tensor i's piece, its box always filled in.
  const Shard& shard(std::size_t i) const { return shards_[i]; }
  bool owns_whole(std::size_t i) const {
    return shards_[i].count == specs_[i].numel() && is_whole(shards_[i].box, specs_[i].shape);
  }
  // Index of a tensor by global name; exa::Error naming it when absent.
  std::size_t index(const std::string& name) const;
  bool contains(const std::string& name) const { return by_name_.count(name) != 0; }

  // This rank's piece of tensor i (flat, in the box's row-major order), and
  // its gradient (an empty View for a frozen tensor, which has none).
  Flat value(std::size_t i) const;
  Flat grad(std::size_t i) const;
  Flat value(const std::string& name) const { return value(index(name)); }
  Flat grad(const std::string& name) const { return grad(index(name)); }
  // All local pieces back to back (the gradients of the trainable ones).
  const Flat& values() const { return values_; }
  const Flat& grads() const { return grads_; }
  std::int64_t local_offset(std::size_t i) const { return local_offsets_[i]; }
  std::int64_t local_numel() const { return local_numel_; }
  // The trainable tensors' local elements, which come first (LoRA's frozen
  // model after them): what the optimizer updates and the gradient norm
  // sums. local_numel() when nothing is frozen. A store in another order
  // (a model read for inference, in model order) has no gradients: 0, and
  // grad() of a trainable tensor throws.
  std::int64_t trainable_numel() const { return trainable_numel_; }
  Flat trainable_grads() const;
  // exa::Error naming the tensor unless the trainable tensors come first.
  void require_trainable_first() const;

  // Philox init keyed by (seed, global name) and each element's global
  // row-major index, whatever the piece: every layout builds bit-identical
  // tensors. `only`, when given, picks the tensors to initialise (expert
  // growth fills the others from the model before it).
  void initialize(std::uint64_t seed, const std::function<bool(const std::string&)>& only = {});
  void zero_grads();
  // Gradient elements [begin, begin + count) to zero; an offloaded span's
  // piece by piece, each out of the resident set once written.
  void zero_grads(std::int64_t begin, std::int64_t count);

  // The offloaded tensors' local element spans (one per tensor, in
  // order), empty when nothing is offloaded, and the tiers themselves (null
  // then).
  const std::vector<ElementSpan>& offloaded() const { return offloaded_; }
  const TieredBuffer* value_tier() const { return value_tier_.get(); }
  const TieredBuffer* grad_tier() const { return grad_tier_.get(); }
  const std::shared_ptr<OffloadFile>& offload_file() const { return offload_file_; }

 private:
  std::vector<ParamSpec> specs_;
  std::vector<Shard> shards_;
  std::vector<std::int64_t> local_offsets_;
  std::unordered_map<std::string, std::size_t> by_name_;
  std::int64_t trainable_numel_ = 0, local_numel_ = 0;
  bool trainable_first_ = true;
  std::string out_of_order_;  // the first trainable tensor after a frozen one
  Flat values_, grads_;
  void allocate(const Offload& offload);
  // Offloaded values of `s` just written: sampled, then out of memory.
  void settle(ElementSpan s) const;
  std::vector<ElementSpan> offloaded_;
  std::shared_ptr<OffloadFile> offload_file_;
  std::shared_ptr<TieredBuffer> value_tier_, grad_tier_;  // own values_/grads_ when offloaded
};

// Whole-tensor pieces for every spec.
std::vector<Shard> whole_shards(const std::vector<ParamSpec>& specs);

}  // namespace exa::model
