#include "io/checkpoint/chunk_sums.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "kernels/checksum.hpp"

namespace exa::io {

std::int64_t chunk_count(std::int64_t numel, std::int64_t chunk_elements) {
  EXA_REQUIRE(chunk_elements > 0, "checkpoint: the checksum chunk must hold at least one element, not {}",
              chunk_elements);
  return (numel + chunk_elements - 1) / chunk_elements;
}

FlatRange chunk_range(std::int64_t k, std::int64_t numel, std::int64_t chunk_elements) {
  return FlatRange{k * chunk_elements, std::min(numel, (k + 1) * chunk_elements)};
}

void add_chunk_partials(const HostFlat& buf, std::int64_t base, const kernels::BoxIndex& map,
                        const std::vector<FlatRange>& ranges, std::int64_t chunk_elements,
                        std::vector<std::uint64_t>& partial, bool host_loop) {
  const auto C = static_cast<std::uint64_t>(chunk_elements);
  for (const auto& r : ranges) {
    std::int64_t p = r.begin;
    while (p < r.end) {
      const std::uint64_t k = map(static_cast<std::uint64_t>(p)) / C;
      // The first element past p whose chunk is beyond k (binary search:
      // the global index grows with the box index).
      std::int64_t lo = p + 1, hi = r.end;
      while (lo < hi) {
        const std::int64_t mid = lo + (hi - lo) / 2;
        if (map(static_cast<std::uint64_t>(mid)) / C == k) {
          lo = mid + 1;
        } else {
          hi = mid;
        }
      }
      EXA_ASSERT(k < partial.size());
      const auto a = static_cast<std::size_t>(p - base), b = static_cast<std::size_t>(lo - base);
      std::uint64_t sum = 0;
      if (host_loop) {
        for (std::size_t i = a; i < b; ++i) {
          sum += kernels::checksum_mix64(map(static_cast<std::uint64_t>(p) + (i - a)), kernels::checksum_bits(buf(i)));
        }
      } else {
        sum = kernels::checksum_box(Kokkos::subview(buf, Kokkos::make_pair(a, b)), map, p);
      }
      partial[k] = kernels::checksum_combine(partial[k], sum);
      p = lo;
    }
  }
}

}  // namespace exa::io
