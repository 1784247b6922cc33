#pragma once
// Top-k sparsification with error feedback (comm.compression = "topk"; the
// data-parallel gradient collectives, parallel/data/data_group.hpp).
//
// A payload of n values is cut into segments of kSegment = 2^16 values
// (the last one shorter). Each segment keeps its k = ceil(ratio * len)
// largest values of a = x + residual by magnitude (a NaN counts as the
// largest, so it reaches the norm check; ties go to the lower index), and
// the residual becomes a with the kept values zeroed: what was not sent is
// owed to the next step, and sent + residual equals a exactly.
//
// Wire format, segment after segment, in 32-bit words (any communicator
// moves them as I32 elements): the k kept values (fp32 bits, ascending
// index), then ceil(k / 2) words of 16-bit offsets within the segment (low
// half first). So a kept value costs 6 bytes, and the words a payload takes
// follow from n and the ratio alone: every rank's payload of the same n
// has the same size, and the collectives need no counts.
//
// Selecting per segment rather than over a whole bucket keeps the offsets
// at 16 bits and the selection's scratch bounded; it is the ratio of every
// 64 Ki values rather than of the bucket.
//
// Encode and decode run on the host (views of a device space are staged
// through host mirrors, as the MPI backend stages its buffers); segments
// run in parallel on the host execution space. Both are deterministic.
// The selection is a radix select on the magnitudes' bits, O(len) a segment.
#include <cstdint>

#include "core/types.hpp"

namespace exa::kernels {

class TopkCodec {
 public:
  static constexpr std::int64_t kSegment = std::int64_t(1) << 16;

  TopkCodec() = default;
  // ratio in (0, 1]: exa::Error naming comm.topk_ratio otherwise.
  explicit TopkCodec(double ratio);

  bool enabled() const { return ratio_ > 0; }
  double ratio() const { return ratio_; }
  // Values kept of a segment of `len` values, and of a payload of n.
  std::int64_t kept_in_segment(std::int64_t len) const;
  std::int64_t kept(std::int64_t n) const;
  // Words an encoded payload of n values takes.
  std::int64_t words(std::int64_t n) const;

  // a = x + residual; out[0, words(n)) <- the kept values of a and their
  // offsets; residual <- a with the kept values zeroed. x has extent n, x is
  // not written; residual covers x's first residual.extent(0) <= n values
  // (the rest is padding: no residual, and what it leaves is dropped).
  void encode(const View1<const float>& x, const View1<float>& residual, const View1<std::int32_t>& out) const;
  // y[i] += v for every kept (i, v) of the payload `in` of `encoded` values,
  // for i < y.extent(0) (a prefix of a zero-padded payload may be decoded).
  void decode_add(const View1<const std::int32_t>& in, std::int64_t encoded, const View1<float>& y) const;

 private:
  double ratio_ = 0;
};

}  // namespace exa::kernels
