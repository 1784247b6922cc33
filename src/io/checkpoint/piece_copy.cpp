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

void for_each_overlap_run(const Piece& src, const Piece& dst,
                          const std::function<void(std::int64_t s, std::int64_t d, std::int64_t n)>& run) {
  const std::size_t n = dst.box.extent.size();
  EXA_REQUIRE(src.box.extent.size() == n && n >= 1, "for_each_overlap_run: boxes of {} and {} dimensions",
              src.box.extent.size(), n);
  if (src.range.size() <= 0 || dst.range.size() <= 0) return;
  // The block both boxes cover, in global coordinates.
  std::vector<std::int64_t> lo(n), hi(n);
  for (std::size_t d = 0; d < n; ++d) {
    lo[d] = std::max(src.box.offset[d], dst.box.offset[d]);
    hi[d] = std::min(src.box.offset[d] + src.box.extent[d], dst.box.offset[d] + dst.box.extent[d]);
    if (lo[d] >= hi[d]) return;
  }
  const auto ss = box_strides(src.box), ds = box_strides(dst.box);
  const std::int64_t row = hi[n - 1] - lo[n - 1];  // one row of the block
  std::vector<std::int64_t> c(lo);                  // the row's first element
  for (;;) {
    std::int64_t fs = 0, fd = 0;  // the row's first element in each box's order
    for (std::size_t d = 0; d < n; ++d) {
      fs += (c[d] - src.box.offset[d]) * ss[d];
      fd += (c[d] - dst.box.offset[d]) * ds[d];
    }
    // Within a row both orders advance together: clip to both ranges.
    const std::int64_t a = std::max({fs, src.range.begin, fs + (dst.range.begin - fd)});
    const std::int64_t b = std::min({fs + row, src.range.end, fs + (dst.range.end - fd)});
    if (a < b) run(a - src.range.begin, fd + (a - fs) - dst.range.begin, b - a);
    // Next row: the odometer over every dimension but the last.
    std::size_t d = n - 1;
    for (;;) {
      if (d == 0) return;
      --d;
      if (++c[d] < hi[d]) break;
      c[d] = lo[d];
    }
  }
}

std::int64_t copy_piece_overlap(const Piece& src, const float* src_values, const Piece& dst, float* dst_values,
                                std::vector<char>& filled) {
  EXA_REQUIRE(filled.size() == static_cast<std::size_t>(dst.range.size()),
              "copy_piece_overlap: {} fill marks for a piece of {} elements", filled.size(), dst.range.size());
  std::int64_t copied = 0;
  for_each_overlap_run(src, dst, [&](std::int64_t s, std::int64_t d, std::int64_t len) {
    std::memcpy(dst_values + d, src_values + s, std::size_t(len) * sizeof(float));
    std::fill(filled.begin() + d, filled.begin() + d + len, char(1));
    copied += len;
  });
  return copied;
}

}  // namespace exa::io
