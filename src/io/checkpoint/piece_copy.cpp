#include "io/checkpoint/piece_copy.hpp"

#include <algorithm>
#include <cstring>

#include "core/error.hpp"

namespace exa::io {

namespace {

// Row-major strides of a box's own order.
std::vector<std::int64_t> box_strides(const model::Box& b) {
  std::vector<std::int64_t> s(b.extent.size(), 1);
  for (std::size_t d = b.extent.size(); d-- > 1;) s[d - 1] = s[d] * b.extent[d];
  return s;
}

}  // namespace

std::int64_t copy_piece_overlap(const Piece& src, const float* src_values, const Piece& dst, float* dst_values,
                                std::vector<char>& filled) {
  const std::size_t n = dst.box.extent.size();
  EXA_REQUIRE(src.box.extent.size() == n && n >= 1, "copy_piece_overlap: boxes of {} and {} dimensions",
              src.box.extent.size(), n);
  EXA_REQUIRE(filled.size() == static_cast<std::size_t>(dst.range.size()),
              "copy_piece_overlap: {} fill marks for a piece of {} elements", filled.size(), dst.range.size());
  if (src.range.size() <= 0 || dst.range.size() <= 0) return 0;
  // The block both boxes cover, in global coordinates.
  std::vector<std::int64_t> lo(n), hi(n);
  for (std::size_t d = 0; d < n; ++d) {
    lo[d] = std::max(src.box.offset[d], dst.box.offset[d]);
    hi[d] = std::min(src.box.offset[d] + src.box.extent[d], dst.box.offset[d] + dst.box.extent[d]);
    if (lo[d] >= hi[d]) return 0;
  }
  const auto ss = box_strides(src.box), ds = box_strides(dst.box);
  const std::int64_t run = hi[n - 1] - lo[n - 1];  // one row of the block
  std::vector<std::int64_t> c(lo);                  // the row's first element
  std::int64_t copied = 0;
  for (;;) {
    std::int64_t fs = 0, fd = 0;  // the row's first element in each box's order
    for (std::size_t d = 0; d < n; ++d) {
      fs += (c[d] - src.box.offset[d]) * ss[d];
      fd += (c[d] - dst.box.offset[d]) * ds[d];
    }
    // Within a row both orders advance together: clip to both ranges.
    const std::int64_t a = std::max({fs, src.range.begin, fs + (dst.range.begin - fd)});
    const std::int64_t b = std::min({fs + run, src.range.end, fs + (dst.range.end - fd)});
    if (a < b) {
      const std::int64_t k = fd + (a - fs) - dst.range.begin;  // first dst element, in dst.range order
      std::memcpy(dst_values + k, src_values + (a - src.range.begin), std::size_t(b - a) * sizeof(float));
      std::fill(filled.begin() + k, filled.begin() + k + (b - a), char(1));
      copied += b - a;
    }
    // Next row: the odometer over every dimension but the last.
    std::size_t d = n - 1;
    for (;;) {
      if (d == 0) return copied;
      --d;
      if (++c[d] < hi[d]) break;
      c[d] = lo[d];
    }
  }
}

}  // namespace exa::io
