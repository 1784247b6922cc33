#pragma once
// ShardLayout: how ZeRO splits the model over the data-parallel ranks.
//
// The unit (unit_hooks.hpp: embedding, each layer, head) is what is gathered
// and reduced together, so it is also what is split: unit u's tensors (each
// the rank's box of it, model/shard.hpp: the whole tensor unless tensor or
// expert parallelism partitions it), flattened and back to back in spec
// order, form a range of numel_u elements, padded to
// parts * block_u with block_u = ceil(numel_u / parts). Part k is
// [k * block_u, (k+1) * block_u) of that range; the rank with part index k
// owns the elements of it that are real (the last parts may be short or
// empty). Every collective then moves equal blocks (reduce-scatter and
// allgather need no counts), and a rank's part of a tensor is one contiguous
// run of its box's row-major elements: a model::Shard, which is what the
// ParameterStore, AdamW and the checkpoint work on.
//
// Each unit also records how many of its elements reduce their gradients
// over each group (ParamSpec::reduce): an MoE layer mixes data-group tensors
// (attention, norms, router, shared experts) with expert-data-group ones
// (the routed experts), which the reductions will have to tell apart once
// expert parallelism makes the two groups differ.
//
// The part index is the rank's position in the data group for the flat
// collectives and comm::hierarchical_block_index for the hierarchical ones.
//
// Two buffer layouts follow:
//   local  the ParameterStore's flat buffer of this rank's shards: unit u's
//          part at local_offset (contiguous: a unit's tensors are adjacent
//          in spec order), local_count elements;
//   padded a whole-model buffer with every unit at work_offset, padded to
//          parts * block (what allgather writes and reduce-scatter reads).
#include <array>
#include <cstdint>
#include <vector>

#include "model/parameter_specs.hpp"
#include "model/parameter_store.hpp"

namespace exa::parallel::data {

struct Unit {
  std::size_t first_spec = 0, end_spec = 0;  // its tensors: specs [first_spec, end_spec)
  std::int64_t numel = 0;                    // real elements
  std::int64_t block = 0;                    // ceil(numel / parts)
  std::int64_t padded = 0;                   // parts * block
  std::int64_t work_offset = 0;              // in the padded whole-model layout
  std::int64_t local_offset = 0;             // this rank's part in the store's local buffer
  std::int64_t local_count = 0;              // real elements of this rank's part (<= block)
  // Real elements whose gradients reduce over each group, indexed by
  // model::ReduceGroup (they add up to numel).
  std::array<std::int64_t, 3> group_numel{};
  std::int64_t numel_of(model::ReduceGroup g) const { return group_numel[static_cast<std::size_t>(g)]; }
};

class ShardLayout {
 public:
  // `parts` ranks, this one holding part `index` of the whole tensors.
  // exa::Error when the specs are not in unit order.
  ShardLayout(const std::vector<model::ParamSpec>& specs, std::int64_t n_layers, int parts, int index);
  // The same over this rank's boxes of the tensors (one per spec, e.g. from
  // model::partition_box); exa::Error when a box does not fit its tensor.
  ShardLayout(const std::vector<model::ParamSpec>& specs, const std::vector<model::Box>& boxes,
              std::int64_t n_layers, int parts, int index);

  int parts() const { return parts_; }
  int index() const { return index_; }
  int size() const { return static_cast<int>(units_.size()); }
  const Unit& unit(int u) const { return units_.at(static_cast<std::size_t>(u)); }
  const std::vector<model::ParamSpec>& specs() const { return specs_; }
  int unit_of_spec(std::size_t spec) const { return spec_unit_.at(spec); }
  // First element of tensor `spec` within its unit's range.
  std::int64_t offset_in_unit(std::size_t spec) const { return spec_offset_.at(spec); }
  model::ReduceGroup reduce_of_spec(std::size_t spec) const { return specs_.at(spec).reduce; }
  // This rank's part of every tensor (for model::ParameterStore).
  std::vector<model::Shard> shards() const;
  std::int64_t numel() const { return numel_; }  // the whole model's parameters
  // This rank's elements in the local layout (the units' parts back to back).
  std::int64_t local_numel() const { return units_.back().local_offset + units_.back().local_count; }
  std::int64_t padded_total() const { return padded_total_; }
  std::int64_t max_padded() const { return max_padded_; }
  std::int64_t max_block() const { return max_block_; }

 private:
  int parts_, index_;
  std::vector<model::ParamSpec> specs_;
  std::vector<model::Box> boxes_;
  std::vector<Unit> units_;
  std::vector<int> spec_unit_;
  std::vector<std::int64_t> spec_offset_;
  std::int64_t numel_ = 0, padded_total_ = 0, max_padded_ = 0, max_block_ = 0;
};

}  // namespace exa::parallel::data
