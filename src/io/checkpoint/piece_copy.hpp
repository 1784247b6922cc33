#pragma once
// Moving elements between two pieces of one tensor held in different
// layouts (model/shard.hpp: a box of the global tensor and a range of the
// box's row-major order): the elements both hold, copied row by row. A
// tier-0 memory snapshot (memory_snapshot.hpp) is kept in the layout that
// wrote it, and a restart in another layout assembles each rank's piece
// from the stored ones this way. Pure index arithmetic.
#include <cstdint>
#include <functional>
#include <vector>

#include "io/checkpoint/piece_cover.hpp"

namespace exa::io {

// Copies every element of `dst` (values in dst.range order: dst_values[0]
// is box element dst.range.begin) that `src` holds from src_values (the same
// for src), and sets filled[k] for each dst element k it wrote (filled has
// dst.range.size() entries). Boxes are of the same global tensor (equal
// dimensions). Returns the elements copied.
// Calls run(s, d, n) for every stretch of n elements that both pieces hold:
// src values [s, s + n) are dst values [d, d + n) (indices into each
// piece's values, which start at its range.begin). In dst's order.
void for_each_overlap_run(const Piece& src, const Piece& dst,
                          const std::function<void(std::int64_t s, std::int64_t d, std::int64_t n)>& run);

std::int64_t copy_piece_overlap(const Piece& src, const float* src_values, const Piece& dst, float* dst_values,
                                std::vector<char>& filled);

}  // namespace exa::io
