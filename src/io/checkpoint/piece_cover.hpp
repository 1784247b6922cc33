#pragma once
// Which rank writes (and checksums) which elements of one tensor, given
// every rank's piece of it (model/shard.hpp: a box of the tensor and a range
// of the box's row-major order), and which elements no rank holds. Pure
// index arithmetic, computed identically on every rank from the gathered
// pieces.
//
// Pieces come from one partition of the tensor: two ranks' boxes are either
// equal (replicas, or ZeRO parts of the same box) or disjoint (different
// tensor- or expert-parallel parts). Among the ranks holding the same box
// each element belongs to the lowest rank holding it (owned_ranges, as for
// whole tensors); boxes that partially overlap are refused. Pieces with an
// empty range hold nothing and are ignored, whatever their box.
#include <cstdint>
#include <string>
#include <vector>

#include "io/checkpoint/flat_range.hpp"
#include "model/shard.hpp"

namespace exa::io {

struct Piece {
  model::Box box;
  FlatRange range;  // in the box's row-major order
};

// Elements of a tensor that no rank holds, as ranges of a box's row-major
// order: inside a box some rank holds (the ranges its holders leave out), or
// a whole block of the tensor outside every held box (one range, all of it).
struct Gap {
  model::Box box;
  std::vector<FlatRange> ranges;
};

class PieceCover {
 public:
  // pieces[r] is rank r's piece of the tensor `what` (for messages, e.g.
  // "/model/embed.weight") of global shape `shape`; the boxes must lie in
  // the tensor (model::resolve_shard). exa::Error naming the tensor, both
  // ranks and both boxes when two boxes overlap without being equal.
  PieceCover(const std::vector<std::int64_t>& shape, std::vector<Piece> pieces, const std::string& what);

  // The ranges of rank r's box that rank r writes: its range minus those of
  // the lower ranks holding the same box. Sorted, disjoint, non-empty.
  std::vector<FlatRange> owned(int rank) const;
  // Everything no rank holds (empty when the pieces cover the tensor), in a
  // fixed order: gaps inside held boxes by the box's lowest rank, then the
  // blocks outside every box.
  const std::vector<Gap>& gaps() const { return gaps_; }

 private:
  std::vector<Piece> pieces_;
  std::vector<int> group_;               // rank -> index of its box in boxes_ (-1: empty piece)
  std::vector<std::vector<int>> ranks_;  // box -> the ranks holding it, ascending
  std::vector<Gap> gaps_;
};

// The blocks of `shape` outside every box (boxes may overlap): disjoint
// boxes, in a fixed order, empty when the boxes cover the tensor.
std::vector<model::Box> uncovered_boxes(const std::vector<std::int64_t>& shape, const std::vector<model::Box>& boxes);

}  // namespace exa::io
