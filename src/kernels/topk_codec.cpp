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

// The selection's order: larger magnitude first, NaN the largest, ties to
// the lower index (a strict total order, so the kept set is unique).
float magnitude(float v) { return std::isnan(v) ? std::numeric_limits<float>::infinity() : std::fabs(v); }

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
        std::vector<std::uint16_t> idx(static_cast<std::size_t>(len));
        for (std::int64_t i = 0; i < len; ++i) {
          a[std::size_t(i)] = lo + i < owed ? hx(std::size_t(lo + i)) + hr(std::size_t(lo + i)) : hx(std::size_t(lo + i));
          idx[std::size_t(i)] = static_cast<std::uint16_t>(i);
        }
        const auto before = [&](std::uint16_t p, std::uint16_t q) {
          const float mp = magnitude(a[p]), mq = magnitude(a[q]);
          return mp > mq || (mp == mq && p < q);
        };
        if (k < len) std::nth_element(idx.begin(), idx.begin() + k, idx.end(), before);
        std::sort(idx.begin(), idx.begin() + k);
        for (std::int64_t i = 0; i < len && lo + i < owed; ++i) hr(std::size_t(lo + i)) = a[std::size_t(i)];
        const std::int64_t w = at[std::size_t(s)];
        for (std::int64_t j = 0; j < k; ++j) {
          const std::uint16_t i = idx[std::size_t(j)];
          std::int32_t bits = 0;
          std::memcpy(&bits, &a[i], sizeof bits);
          ho(std::size_t(w + j)) = bits;
          if (lo + i < owed) hr(std::size_t(lo + i)) = 0.0f;
        }
        for (std::int64_t j = 0; j < k; j += 2) {
          const std::uint32_t hi = j + 1 < k ? idx[std::size_t(j + 1)] : 0u;
          ho(std::size_t(w + k + j / 2)) = static_cast<std::int32_t>(std::uint32_t(idx[std::size_t(j)]) | (hi << 16));
        }
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
