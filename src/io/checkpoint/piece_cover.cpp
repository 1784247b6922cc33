#include "io/checkpoint/piece_cover.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace exa::io {

namespace {

bool intersect(const model::Box& a, const model::Box& b) {
  for (std::size_t d = 0; d < a.offset.size(); ++d) {
    const std::int64_t lo = std::max(a.offset[d], b.offset[d]);
    const std::int64_t hi = std::min(a.offset[d] + a.extent[d], b.offset[d] + b.extent[d]);
    if (lo >= hi) return false;
  }
  return !a.offset.empty();
}

// r minus c (which intersects r) as at most 2N disjoint boxes: slabs of r
// below and above c along dimension 0, then, inside c's span there, along
// dimension 1, and so on.
void subtract(const model::Box& r, const model::Box& c, std::vector<model::Box>& out) {
  model::Box rest = r;
  for (std::size_t d = 0; d < r.offset.size(); ++d) {
    const std::int64_t lo = rest.offset[d], hi = rest.offset[d] + rest.extent[d];
    const std::int64_t clo = std::max(lo, c.offset[d]), chi = std::min(hi, c.offset[d] + c.extent[d]);
    if (clo > lo) {
      model::Box below = rest;
      below.extent[d] = clo - lo;
      out.push_back(below);
    }
    if (hi > chi) {
      model::Box above = rest;
      above.offset[d] = chi;
      above.extent[d] = hi - chi;
      out.push_back(above);
    }
    rest.offset[d] = clo;
    rest.extent[d] = chi - clo;
  }
}

}  // namespace

std::vector<model::Box> uncovered_boxes(const std::vector<std::int64_t>& shape, const std::vector<model::Box>& boxes) {
  std::vector<model::Box> left;
  if (model::whole_box(shape).numel() > 0) left.push_back(model::whole_box(shape));
  for (const auto& c : boxes) {
    if (c.numel() == 0) continue;
    std::vector<model::Box> next;
    for (const auto& r : left) {
      if (intersect(r, c)) {
        subtract(r, c, next);
      } else {
        next.push_back(r);
      }
    }
    left = std::move(next);
  }
  return left;
}

PieceCover::PieceCover(const std::vector<std::int64_t>& shape, std::vector<Piece> pieces, const std::string& what)
    : pieces_(std::move(pieces)), group_(pieces_.size(), -1) {
  std::vector<model::Box> boxes;
  for (std::size_t r = 0; r < pieces_.size(); ++r) {
    const Piece& p = pieces_[r];
    if (p.range.size() <= 0) continue;
    auto it = std::find(boxes.begin(), boxes.end(), p.box);
    if (it == boxes.end()) {
      for (std::size_t b = 0; b < boxes.size(); ++b) {
        EXA_REQUIRE(!intersect(boxes[b], p.box),
                    "checkpoint: ranks {} and {} hold overlapping but different boxes of {} ({} and {}): the ranks' "
                    "pieces of a tensor must come from one partition, with equal or disjoint boxes",
                    ranks_[b].front(), r, what, model::box_str(boxes[b]), model::box_str(p.box));
      }
      boxes.push_back(p.box);
      ranks_.emplace_back();
      it = boxes.end() - 1;
    }
    const int b = static_cast<int>(it - boxes.begin());
    group_[r] = b;
    ranks_[static_cast<std::size_t>(b)].push_back(static_cast<int>(r));
  }
  for (std::size_t b = 0; b < boxes.size(); ++b) {
    std::vector<FlatRange> held;
    for (int r : ranks_[b]) held.push_back(pieces_[static_cast<std::size_t>(r)].range);
    auto missing = uncovered_ranges(held, boxes[b].numel());
    if (!missing.empty()) gaps_.push_back(Gap{boxes[b], std::move(missing)});
  }
  for (auto& box : uncovered_boxes(shape, boxes)) {
    const std::int64_t n = box.numel();
    gaps_.push_back(Gap{std::move(box), {FlatRange{0, n}}});
  }
}

std::vector<FlatRange> PieceCover::owned(int rank) const {
  EXA_ASSERT(rank >= 0 && static_cast<std::size_t>(rank) < pieces_.size());
  const int b = group_[static_cast<std::size_t>(rank)];
  if (b < 0) return {};
  const auto& holders = ranks_[static_cast<std::size_t>(b)];
  std::vector<FlatRange> ranges;
  int me = 0;
  for (std::size_t k = 0; k < holders.size(); ++k) {
    if (holders[k] == rank) me = static_cast<int>(k);
    ranges.push_back(pieces_[static_cast<std::size_t>(holders[k])].range);
  }
  return owned_ranges(ranges, me);
}

}  // namespace exa::io
