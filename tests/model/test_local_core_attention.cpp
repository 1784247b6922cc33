// LocalCoreAttention takes any query and key positions: it hands them to the
// attention kernels (tests/kernels/test_attention_offsets.cpp checks the
// kernels' masking, gradients and the ring decomposition), so the seam's
// results are the kernels' bit for bit, for a key block of another length
// and position than the queries as for the usual same-position case.
#include <gtest/gtest.h>

#include <cstring>
#include <string>

#include "harness/fd_check.hpp"
#include "model/seams/local_core_attention.hpp"

using exa::model::AttentionPositions;
using exa::model::LocalCoreAttention;
using V4 = exa::View4<float>;
using V3 = exa::View3<float>;

namespace {

struct Results {
  V4 out, dq, dk, dv;
  V3 lse;
};

Results make(int B, int T, int Tk, int H, int Hkv, int hd) {
  return {V4("out", B, T, H, hd), V4("dq", B, T, H, hd), V4("dk", B, Tk, Hkv, hd), V4("dv", B, Tk, Hkv, hd),
          V3("lse", B, H, T)};
}

template <class A>
bool same_bits(const A& a, const A& b) {
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  return ha.span() == hb.span() && std::memcmp(ha.data(), hb.data(), ha.span() * sizeof(float)) == 0;
}

void expect_same(const Results& a, const Results& b, const std::string& what) {
  EXPECT_TRUE(same_bits(a.out, b.out)) << what << ": out";
  EXPECT_TRUE(same_bits(a.lse, b.lse)) << what << ": lse";
  EXPECT_TRUE(same_bits(a.dq, b.dq)) << what << ": dq";
  EXPECT_TRUE(same_bits(a.dk, b.dk)) << what << ": dk";
  EXPECT_TRUE(same_bits(a.dv, b.dv)) << what << ": dv";
}

}  // namespace

TEST(LocalCoreAttention, PassesAnyPositionsToTheKernels) {
  const int B = 2, T = 9, H = 4, Hkv = 2, hd = 8;
  const exa::kernels::AttentionTiles tiles{4, 3, 4};
  const LocalCoreAttention<float> core(tiles);
  struct Case {
    const char* name;
    int Tk;
    AttentionPositions pos;
  };
  const Case cases[] = {{"queries after a shorter key block", 6, {20, 12}},
                        {"queries before the keys, some rows see none", 11, {0, 4}},
                        {"same position", 9, {0, 0}}};
  for (const Case& c : cases) {
    V4 q("q", B, T, H, hd), k("k", B, c.Tk, Hkv, hd), v("v", B, c.Tk, Hkv, hd), dout("dout", B, T, H, hd);
    exa::test::fill_uniform(q, 1);
    exa::test::fill_uniform(k, 2);
    exa::test::fill_uniform(v, 3);
    exa::test::fill_uniform(dout, 4);
    Results seam = make(B, T, c.Tk, H, Hkv, hd), kern = make(B, T, c.Tk, H, Hkv, hd);
    core.forward(q, k, v, seam.out, seam.lse, c.pos);
    core.backward(dout, q, k, v, seam.out, seam.lse, seam.dq, seam.dk, seam.dv, c.pos);
    const exa::kernels::AttentionOffsets off{c.pos.q_offset, c.pos.k_offset};
    exa::kernels::attention_forward(q, k, v, kern.out, kern.lse, tiles, off);
    exa::kernels::attention_backward(dout, q, k, v, kern.out, kern.lse, kern.dq, kern.dk, kern.dv, tiles, off);
    expect_same(seam, kern, c.name);
    // Only the distance between the blocks matters.
    Results shifted = make(B, T, c.Tk, H, Hkv, hd);
    const AttentionPositions far{c.pos.q_offset + 1000, c.pos.k_offset + 1000};
    core.forward(q, k, v, shifted.out, shifted.lse, far);
    core.backward(dout, q, k, v, shifted.out, shifted.lse, shifted.dq, shifted.dk, shifted.dv, far);
    expect_same(shifted, seam, std::string(c.name) + ", both shifted by 1000");
  }
}
