#pragma once
// BoxIndex: the global row-major index of each element of an N-d box of a
// tensor, for kernels that key per-element work by global position
// (Philox initialisation, layout-independent checksums).
//
// A box is a rectangular block of a tensor of global shape (n0, ..., n{N-1}):
// offset o_d and extent e_d per dimension. Its elements, listed in the box's
// own row-major order k = 0 .. prod(e) - 1, sit at global flat indices
//     g(k) = sum_d (o_d + c_d(k)) * stride_d,  stride_d = prod_{j>d} n_j,
// where c(k) are k's coordinates within the box. A tensor split by tensor
// or expert parallelism is a box; ZeRO then takes a contiguous range of k.
//
// Construction merges dimensions that stay contiguous in the global tensor
// (an inner dimension held whole joins its outer neighbour; extent-1
// dimensions fold into the base), so a whole tensor maps with one addition
// and a box split on the outermost dimension with one more.
#include <cstdint>
#include <vector>

#include "core/error.hpp"
#include "core/kokkos_shims.hpp"

namespace exa::kernels {

struct BoxIndex {
  static constexpr int kMaxRank = 8;
  int rank = 1;                          // after merging, >= 1
  std::uint64_t extent[kMaxRank] = {0};  // merged box extents
  std::uint64_t stride[kMaxRank] = {1};  // their global strides
  std::uint64_t base = 0;                // global index of the box's first element
  std::uint64_t numel = 0;

  // Global flat index of the box's element k (its row-major position).
  KOKKOS_INLINE_FUNCTION std::uint64_t operator()(std::uint64_t k) const {
    std::uint64_t g = base;
    for (int d = rank - 1; d > 0; --d) {
      g += (k % extent[d]) * stride[d];
      k /= extent[d];
    }
    return g + k * stride[0];
  }
  // The box is one contiguous run of the global tensor (g(k) = base + k).
  bool contiguous() const { return rank == 1 && stride[0] == 1; }
};

// exa::Error unless offset and extent have one entry per dimension of
// `shape` (at most kMaxRank) and 0 <= offset, 0 <= extent,
// offset + extent <= shape in every dimension.
inline BoxIndex box_index(const std::vector<std::int64_t>& shape, const std::vector<std::int64_t>& offset,
                          const std::vector<std::int64_t>& extent) {
  const std::size_t n = shape.size();
  EXA_REQUIRE(n >= 1 && n <= static_cast<std::size_t>(BoxIndex::kMaxRank),
              "box_index: tensors of 1 to {} dimensions are supported, not {}", BoxIndex::kMaxRank, n);
  EXA_REQUIRE(offset.size() == n && extent.size() == n,
              "box_index: a box of a {}-d tensor needs {} offsets and extents, got {} and {}", n, n, offset.size(),
              extent.size());
  BoxIndex b;
  b.numel = 1;
  std::vector<std::uint64_t> stride(n);
  std::uint64_t s = 1;
  for (std::size_t d = n; d-- > 0;) {
    EXA_REQUIRE(offset[d] >= 0 && extent[d] >= 0 && offset[d] + extent[d] <= shape[d],
                "box_index: dimension {} of the box, [{}, {}), lies outside the tensor's extent {}", d, offset[d],
                offset[d] + extent[d], shape[d]);
    stride[d] = s;
    s *= static_cast<std::uint64_t>(shape[d]);
    b.numel *= static_cast<std::uint64_t>(extent[d]);
  }
  if (b.numel == 0) return b;  // no element: the map is never evaluated
  // Merged dimensions, innermost first.
  std::vector<std::uint64_t> ext, str;
  for (std::size_t d = n; d-- > 0;) {
    b.base += static_cast<std::uint64_t>(offset[d]) * stride[d];
    const auto e = static_cast<std::uint64_t>(extent[d]);
    if (e == 1) continue;  // contributes to the base only
    if (!ext.empty() && ext.back() * str.back() == stride[d]) {
      ext.back() *= e;  // the inner run is whole: dimension d extends it
    } else {
      ext.push_back(e);
      str.push_back(stride[d]);
    }
  }
  if (ext.empty()) {  // a single element
    ext.push_back(1);
    str.push_back(1);
  }
  b.rank = static_cast<int>(ext.size());
  for (int d = 0; d < b.rank; ++d) {
    b.extent[d] = ext[ext.size() - 1 - static_cast<std::size_t>(d)];
    b.stride[d] = str[str.size() - 1 - static_cast<std::size_t>(d)];
  }
  return b;
}

// The whole tensor as a box (g(k) = k).
inline BoxIndex whole_box_index(const std::vector<std::int64_t>& shape) {
  return box_index(shape, std::vector<std::int64_t>(shape.size(), 0), shape);
}

}  // namespace exa::kernels
