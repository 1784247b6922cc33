#pragma once
// A contiguous range of a tensor's (or a box of it's) row-major elements as
// a union of rectangular blocks, so that a rank's Shard can be written into
// the global N-d dataset as HDF5 hyperslabs (no HDF5 here: pure index
// arithmetic).
//
// The range [offset, offset + count) of a tensor with shape (n0, ..., n{N-1})
// splits into at most 2N - 1 blocks: partial rows climbing up to the first
// boundary of the outermost dimension, a run of whole outermost slices, then
// partial rows descending to the range's end. The blocks are returned in
// row-major order and cover the range exactly, so listing their elements
// block by block (each in row-major order) enumerates offset, offset+1, ...
#include <cstdint>
#include <vector>

namespace exa::io {

struct Block {
  std::vector<std::int64_t> start, count;  // one entry per dimension
};

// Throws exa::Error unless 0 <= offset, 0 <= count and offset + count <=
// numel(shape), and for a rank-0 shape. An empty range gives no blocks.
std::vector<Block> flat_range_blocks(const std::vector<std::int64_t>& shape, std::int64_t offset, std::int64_t count);

// The range [offset, offset + count) of the row-major order of a box (the
// block at `box_offset` of extent `box_extent` of a larger tensor) as blocks
// of the tensor: flat_range_blocks of the box's shape, shifted by the box's
// offset. Within a box the tensor's row-major order is the box's, so these
// blocks too enumerate the range in order. exa::Error as flat_range_blocks.
std::vector<Block> box_range_blocks(const std::vector<std::int64_t>& box_offset,
                                    const std::vector<std::int64_t>& box_extent, std::int64_t offset,
                                    std::int64_t count);

// Half-open range [begin, end) of flat element indices.
struct FlatRange {
  std::int64_t begin = 0, end = 0;
  std::int64_t size() const { return end - begin; }
  bool operator==(const FlatRange& o) const { return begin == o.begin && end == o.end; }
};

// Ranges held by every rank of a communicator for one tensor: ranges[r] is
// rank r's [offset, offset + count). Ranks may overlap (replicas) and leave
// gaps. Each element belongs to the lowest rank holding it:
//   owned_ranges(ranges, r) = rank r's range minus those of ranks < r,
//   uncovered_ranges(ranges, numel) = [0, numel) minus every rank's range,
// both sorted, disjoint and without empty entries. So the owned ranges of all
// ranks plus the uncovered ones partition the tensor: the checkpoint writes
// each element once and sums each checksum term once, whatever the layout.
std::vector<FlatRange> owned_ranges(const std::vector<FlatRange>& ranges, int rank);
std::vector<FlatRange> uncovered_ranges(const std::vector<FlatRange>& ranges, std::int64_t numel);

}  // namespace exa::io
