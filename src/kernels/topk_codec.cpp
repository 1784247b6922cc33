#include "kernels/topk_codec.hpp"

#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <vector>

#include "core/error.hpp"

namespace exa::kernels {

namespace {

using HostSpace = Kokkos::DefaultHostExecutionSpace;

std::int64_t segments(std::int64_t n) { return (n + TopkCodec::kSegment - 1) / TopkCodec::kSegment; }

std::int64_t seg_len(std::int64_t n, std::int64_t s) {
  return std::min(TopkCodec::kSegment, n - s * TopkCodec::kSegment);
}

std::int64_t seg_words(std::int64_t k) { return k + (k + 1) / 2; }

// Each segment's first word in an encoded payload of n values, and the
// payload's size last.
std::vector<std::int64_t> segment_starts(const TopkCodec& c, std::int64_t n) {
  std::vector<std::int64_t> at(std::size_t(segments(n)) + 1, 0);
  for (std::int64_t s = 0; s < segments(n); ++s)
    at[std::size_t(s) + 1] = at[std::size_t(s)] + seg_words(c.kept_in_segment(seg_len(n, s)));
  return at;
}

// The selection's order: larger magnitude first, NaN as large as an
// infinity, ties to the lower index (a strict total order, so the kept set
// is unique). A magnitude's bits compare as unsigned integers in the same
// order as the magnitudes, which the radix select below uses.
std::uint32_t magnitude_key(float v) {
  if (std::isnan(v)) return 0x7F800000u;  // +inf's bits
  std::uint32_t bits = 0;
  std::memcpy(&bits, &v, sizeof bits);
  return bits & 0x7FFFFFFFu;
}

// The k-th largest of keys [0, len) (1 <= k <= len) by a radix select over
// three digits of the 31-bit keys (11, 11 and 9 bits), each pass counting
// only the candidates the previous digits left; and how many keys equal to
// it are kept (the lowest-indexed ones), so that k are kept in all.
// Two passes over the segment at most, O(len): nth_element's comparisons
// were the encoder's cost.
struct Threshold {
  std::uint32_t key;
  std::int64_t equal_kept;
};

Threshold kth_largest(const std::vector<std::uint32_t>& keys, std::int64_t k, std::vector<std::uint32_t>& candidates) {
  constexpr int kShift[3] = {20, 9, 0};
  constexpr std::uint32_t kMask[3] = {0x7FFu, 0x7FFu, 0x1FFu};
  std::uint32_t prefix = 0;
  std::int64_t need = k;  // among the keys matching the prefix so far
  std::vector<std::int64_t> count(2048);
  for (int d = 0; d < 3; ++d) {
    std::fill(count.begin(), count.end(), 0);
    const auto& from = d == 0 ? keys : candidates;
    for (const std::uint32_t key : from) ++count[(key >> kShift[d]) & kMask[d]];
    std::int64_t bin = std::int64_t(kMask[d]);
    for (; bin > 0 && count[std::size_t(bin)] < need; --bin) need -= count[std::size_t(bin)];
    prefix |= std::uint32_t(bin) << kShift[d];
    if (d == 2) break;
    // The keys in the chosen bin (the same higher digits) go on.
    const std::uint32_t high = ~((1u << kShift[d]) - 1u);
    std::vector<std::uint32_t> next;
    next.reserve(std::size_t(count[std::size_t(bin)]));
    for (const std::uint32_t key : from)
      if ((key & high) == prefix) next.push_back(key);
    candidates.swap(next);
  }
  return {prefix, need};
}

}  // namespace

TopkCodec::TopkCodec(double ratio) : ratio_(ratio) {
  EXA_REQUIRE(ratio > 0 && ratio <= 1,
              "comm.topk_ratio = {} is not in (0, 1]: it is the fraction of each gradient payload sent "
              "(0.01 keeps the largest 1%)", ratio);
}

std::int64_t TopkCodec::kept_in_segment(std::int64_t len) const {
  if (len <= 0) return 0;
  const auto k = static_cast<std::int64_t>(std::ceil(ratio_ * double(len)));
  return std::clamp<std::int64_t>(k, 1, len);
}

std::int64_t TopkCodec::kept(std::int64_t n) const {
  std::int64_t k = 0;
  for (std::int64_t s = 0; s < segments(n); ++s) k += kept_in_segment(seg_len(n, s));
  return k;
}

std::int64_t TopkCodec::words(std::int64_t n) const { return segment_starts(*this, n).back(); }

void TopkCodec::encode(const View1<const float>& x, const View1<float>& residual,
                       const View1<std::int32_t>& out) const {
  EXA_ASSERT(enabled());
  const auto n = std::int64_t(x.extent(0));
  const auto owed = std::int64_t(residual.extent(0));
  EXA_ASSERT(owed <= n && std::int64_t(out.extent(0)) >= words(n));
  const auto hx = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), x);
  const auto hr = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), residual);
  const auto ho = Kokkos::create_mirror_view(out);
  const std::int64_t S = segments(n);
  const auto at = segment_starts(*this, n);
  Kokkos::parallel_for(
      "exa::topk_encode", Kokkos::RangePolicy<HostSpace>(0, S), [&](const std::int64_t s) {
        const std::int64_t lo = s * kSegment, len = seg_len(n, s), k = kept_in_segment(len);
        std::vector<float> a(static_cast<std::size_t>(len));
        std::vector<std::uint32_t> keys(static_cast<std::size_t>(len)), candidates;
        for (std::int64_t i = 0; i < len; ++i) {
          const float v = lo + i < owed ? hx(std::size_t(lo + i)) + hr(std::size_t(lo + i)) : hx(std::size_t(lo + i));
          a[std::size_t(i)] = v;
          keys[std::size_t(i)] = magnitude_key(v);
        }
        // Everything above the threshold, and its first equal_kept equals:
        // k values in ascending index order.
        const Threshold t = k < len ? kth_largest(keys, k, candidates) : Threshold{0, len};
        const std::int64_t w = at[std::size_t(s)];
        std::int64_t j = 0, equal = 0;
        std::uint32_t pending = 0;  // an offset waiting for its word's high half
        for (std::int64_t i = 0; i < len; ++i) {
          const std::uint32_t key = keys[std::size_t(i)];
          const bool keep = key > t.key || (key == t.key && equal++ < t.equal_kept);
          const bool owes = lo + i < owed;
          if (!keep) {
            if (owes) hr(std::size_t(lo + i)) = a[std::size_t(i)];
            continue;
          }
          std::int32_t bits = 0;
          std::memcpy(&bits, &a[std::size_t(i)], sizeof bits);
          ho(std::size_t(w + j)) = bits;
          if (owes) hr(std::size_t(lo + i)) = 0.0f;
          if (j % 2 == 0) {
            pending = std::uint32_t(i);
          } else {
            ho(std::size_t(w + k + j / 2)) = static_cast<std::int32_t>(pending | (std::uint32_t(i) << 16));
          }
          ++j;
        }
        EXA_ASSERT(j == k);
        if (k % 2 == 1) ho(std::size_t(w + k + k / 2)) = static_cast<std::int32_t>(pending);
      });
  HostSpace().fence();
  Kokkos::deep_copy(residual, hr);
  Kokkos::deep_copy(out, ho);
}

void TopkCodec::decode_add(const View1<const std::int32_t>& in, std::int64_t encoded, const View1<float>& y) const {
  EXA_ASSERT(enabled());
  const auto m = std::int64_t(y.extent(0));
  EXA_ASSERT(m <= encoded && std::int64_t(in.extent(0)) >= words(encoded));
  const auto hi = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), in);
  const auto hy = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), y);
  const std::int64_t S = segments(encoded);
  const auto at = segment_starts(*this, encoded);
  // Segments write disjoint ranges of y.
  Kokkos::parallel_for(
      "exa::topk_decode", Kokkos::RangePolicy<HostSpace>(0, S), [&](const std::int64_t s) {
        const std::int64_t lo = s * kSegment, k = kept_in_segment(seg_len(encoded, s)), w = at[std::size_t(s)];
        for (std::int64_t j = 0; j < k; ++j) {
          const auto word = static_cast<std::uint32_t>(hi(std::size_t(w + k + j / 2)));
          const std::int64_t i = lo + std::int64_t(j % 2 == 0 ? word & 0xFFFFu : word >> 16);
          if (i >= m) continue;
          float v = 0;
          const std::int32_t bits = hi(std::size_t(w + j));
          std::memcpy(&v, &bits, sizeof v);
          hy(std::size_t(i)) += v;
        }
      });
  HostSpace().fence();
  Kokkos::deep_copy(y, hy);
}

}  // namespace exa::kernels
