#pragma once
// A rank's piece of a model tensor: a Box of the global tensor and a
// contiguous range of that box's own row-major elements.
//
// Tensor and expert parallelism give each rank a box (offset and extent per
// dimension of the global shape: e.g. rows [F/2, F) of a column-parallel
// weight, or experts [E/2, E) of an expert tensor); ZeRO then shards the
// box's flattening as it shards whole tensors, so a rank's piece is
//     Shard{offset, count, box}:  elements [offset, offset + count) of the
//                                 box's row-major order.
// Without tensor or expert parallelism the box is the whole tensor and the
// range a contiguous run of the tensor's row-major (global) order; a Shard
// whose box has no dimensions means exactly that (resolve_shard fills it in).
//
// Values are always laid out in the box's row-major order; the global index
// of each element (what Philox initialisation and the checkpoint checksums
// key on) comes from kernels::BoxIndex.
#include <cstdint>
#include <string>
#include <vector>

#include "kernels/box_index.hpp"
#include "model/parameter_specs.hpp"

namespace exa::model {

struct Box {
  std::vector<std::int64_t> offset, extent;  // one entry per dimension of the global shape
  std::int64_t numel() const;
  bool operator==(const Box& o) const { return offset == o.offset && extent == o.extent; }
  bool operator!=(const Box& o) const { return !(*this == o); }
};

struct Shard {
  std::int64_t offset = 0;  // first owned element, in the box's row-major order
  std::int64_t count = 0;   // owned elements
  Box box;                  // no dimensions: the whole tensor
};

// The whole tensor of this shape.
Box whole_box(const std::vector<std::int64_t>& shape);
bool is_whole(const Box& box, const std::vector<std::int64_t>& shape);

// Part `index` of `parts` equal parts of `within` along dimension `dim`
// (the box's extent there must be divisible by `parts`). exa::Error naming
// the tensor, the dimension, its extent and `parts` when it is not, or when
// dim, parts or index do not exist. Partitions compose: expert parallelism
// splits dim 0 of an expert tensor, expert tensor parallelism then splits
// the result along its FFN dimension.
Box partition_box(const ParamSpec& spec, const Box& within, int dim, int parts, int index);
// The same of the whole tensor.
Box partition_box(const ParamSpec& spec, int dim, int parts, int index);

// `s` with its box filled in (whole tensor when it has no dimensions),
// checked against the tensor `name` of global `shape`: the box lies inside
// the tensor and the range inside the box. exa::Error naming the tensor
// otherwise.
Shard resolve_shard(const Shard& s, const std::string& name, const std::vector<std::int64_t>& shape);

// Global flat index of each element of a resolved shard's box.
kernels::BoxIndex box_index(const Shard& resolved, const std::vector<std::int64_t>& shape);

// "offset [0, 8] extent [16, 8]"
std::string box_str(const Box& b);

}  // namespace exa::model
