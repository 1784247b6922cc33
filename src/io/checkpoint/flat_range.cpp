#include "io/checkpoint/flat_range.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace exa::io {

namespace {

// Appends the blocks of [lo, hi) within the sub-array at dimension d whose
// outer indices are fixed to `prefix` (prefix.size() == d).
void split(const std::vector<std::int64_t>& shape, std::vector<std::int64_t>& prefix, std::int64_t lo, std::int64_t hi,
           std::vector<Block>& out) {
  if (lo >= hi) return;
  const std::size_t n = shape.size(), d = prefix.size();
  auto block = [&](std::int64_t first, std::int64_t len) {
    Block b;
    b.start = prefix;
    b.count.assign(d, 1);
    b.start.push_back(first);
    b.count.push_back(len);
    for (std::size_t k = d + 1; k < n; ++k) {
      b.start.push_back(0);
      b.count.push_back(shape[k]);
    }
    out.push_back(std::move(b));
  };
  std::int64_t inner = 1;  // elements per index of dimension d
  for (std::size_t k = d + 1; k < n; ++k) inner *= shape[k];
  if (inner == 1) {  // last dimension (or all inner dimensions of extent 1)
    block(lo, hi - lo);
    return;
  }
  std::int64_t i0 = lo / inner;
  if (lo % inner != 0) {  // head: a partial slice i0
    const std::int64_t end = std::min(hi, (i0 + 1) * inner);
    prefix.push_back(i0);
    split(shape, prefix, lo - i0 * inner, end - i0 * inner, out);
    prefix.pop_back();
    if (end == hi) return;
    ++i0;
  }
  const std::int64_t i1 = hi / inner;  // whole slices [i0, i1)
  if (i1 > i0) block(i0, i1 - i0);
  if (hi % inner != 0) {  // tail: a partial slice i1
    prefix.push_back(i1);
    split(shape, prefix, 0, hi - i1 * inner, out);
    prefix.pop_back();
  }
}

}  // namespace

std::vector<Block> flat_range_blocks(const std::vector<std::int64_t>& shape, std::int64_t offset, std::int64_t count) {
  EXA_REQUIRE(!shape.empty(), "flat_range_blocks: a tensor needs at least one dimension");
  std::int64_t numel = 1;
  for (auto s : shape) {
    EXA_REQUIRE(s >= 0, "flat_range_blocks: negative extent {}", s);
    numel *= s;
  }
  EXA_REQUIRE(offset >= 0 && count >= 0 && offset + count <= numel,
              "flat_range_blocks: range [{}, {}) lies outside a tensor of {} elements", offset, offset + count, numel);
  std::vector<Block> out;
  std::vector<std::int64_t> prefix;
  split(shape, prefix, offset, offset + count, out);
  return out;
}

std::vector<Block> box_range_blocks(const std::vector<std::int64_t>& box_offset,
                                    const std::vector<std::int64_t>& box_extent, std::int64_t offset,
                                    std::int64_t count) {
  EXA_REQUIRE(box_offset.size() == box_extent.size(), "box_range_blocks: {} offsets for {} extents",
              box_offset.size(), box_extent.size());
  auto blocks = flat_range_blocks(box_extent, offset, count);
  for (auto& b : blocks)
    for (std::size_t d = 0; d < b.start.size(); ++d) b.start[d] += box_offset[d];
  return blocks;
}

namespace {

// Sorted, merged union of the non-empty ranges.
std::vector<FlatRange> merged(std::vector<FlatRange> r) {
  r.erase(std::remove_if(r.begin(), r.end(), [](const FlatRange& x) { return x.end <= x.begin; }), r.end());
  std::sort(r.begin(), r.end(), [](const FlatRange& a, const FlatRange& b) { return a.begin < b.begin; });
  std::vector<FlatRange> out;
  for (const auto& x : r) {
    if (!out.empty() && x.begin <= out.back().end) {
      out.back().end = std::max(out.back().end, x.end);
    } else {
      out.push_back(x);
    }
  }
  return out;
}

// [lo, hi) minus a sorted, merged union.
std::vector<FlatRange> subtract(std::int64_t lo, std::int64_t hi, const std::vector<FlatRange>& cut) {
  std::vector<FlatRange> out;
  for (const auto& c : cut) {
    if (lo >= hi) break;
    if (c.end <= lo) continue;
    if (c.begin >= hi) break;
    if (c.begin > lo) out.push_back({lo, c.begin});
    lo = std::max(lo, c.end);
  }
  if (lo < hi) out.push_back({lo, hi});
  return out;
}

}  // namespace

std::vector<FlatRange> owned_ranges(const std::vector<FlatRange>& ranges, int rank) {
  EXA_ASSERT(rank >= 0 && static_cast<std::size_t>(rank) < ranges.size());
  const FlatRange mine = ranges[static_cast<std::size_t>(rank)];
  if (mine.end <= mine.begin) return {};
  std::vector<FlatRange> lower;
  for (int r = 0; r < rank; ++r) {
    const FlatRange& x = ranges[static_cast<std::size_t>(r)];
    if (x.end > mine.begin && x.begin < mine.end) lower.push_back(x);
  }
  return subtract(mine.begin, mine.end, merged(std::move(lower)));
}

std::vector<FlatRange> uncovered_ranges(const std::vector<FlatRange>& ranges, std::int64_t numel) {
  return subtract(0, numel, merged(ranges));
}

}  // namespace exa::io
