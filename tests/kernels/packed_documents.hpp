#pragma once
// Packed-sequence documents for the attention tests (kernels/attention.hpp's
// and kernels/lsh_attention.hpp's AttentionOffsets documents): B sequences
// of P positions cut into documents at `cuts` (document starts after 0),
// sequence b's cuts shifted by b so that rows differ; the start and end of
// each position's document on the host and as device arrays.
#include <Kokkos_Core.hpp>
#include <cstdint>
#include <vector>

#include "harness/backend.hpp"
#include "kernels/attention.hpp"

namespace exa::test {

struct Docs {
  using I2 = Kokkos::View<std::int32_t**, Kokkos::LayoutRight, TestDevice>;
  int B = 0, P = 0;
  std::vector<std::int32_t> start, end;  // [B*P]
  I2 d_start, d_end;

  Docs(int B_, int P_, const std::vector<int>& cuts) : B(B_), P(P_), start(B_ * P_), end(B_ * P_) {
    for (int b = 0; b < B; ++b) {
      std::vector<int> s{0};
      for (int c : cuts)
        if (c + b > 0 && c + b < P) s.push_back(c + b);
      s.push_back(P);
      for (std::size_t d = 0; d + 1 < s.size(); ++d)
        for (int p = s[d]; p < s[d + 1]; ++p) {
          start[std::size_t(b * P + p)] = s[d];
          end[std::size_t(b * P + p)] = s[d + 1];
        }
    }
    d_start = I2("doc_start", B, P);
    d_end = I2("doc_end", B, P);
    auto hs = Kokkos::create_mirror_view(d_start);
    auto he = Kokkos::create_mirror_view(d_end);
    for (int i = 0; i < B * P; ++i) {
      hs.data()[i] = start[std::size_t(i)];
      he.data()[i] = end[std::size_t(i)];
    }
    Kokkos::deep_copy(d_start, hs);
    Kokkos::deep_copy(d_end, he);
  }
  kernels::AttentionOffsets at(index_t q_offset = 0, index_t k_offset = 0) const {
    return {q_offset, k_offset, d_start.data(), d_end.data(), P};
  }
  bool visible(int b, index_t qp, index_t kp) const { return kp <= qp && kp >= start[std::size_t(b * P + qp)]; }
};

// A view's values on the host, in double.
template <class A>
std::vector<double> host_values(const A& a) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  return std::vector<double>(h.data(), h.data() + h.span());
}

}  // namespace exa::test
