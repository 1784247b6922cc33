// Every kernel takes a trailing execution-space instance (default: the
// default instance). These tests run chains of kernels once without it and
// once on an explicit instance and require bit-identical results. On CUDA the
// explicit instance owns a separate stream, so the chains also check that
// each kernel (gemm included) is ordered on that stream after the one that
// produced its inputs; on host backends it is simply TestExec{}.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <string>
#include <type_traits>
#include <vector>

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime_api.h>
#endif

#include "harness/backend.hpp"
#include "harness/fd_check.hpp"
#include "kernels/adamw.hpp"
#include "kernels/attention.hpp"
#include "kernels/checksum.hpp"
#include "kernels/convert.hpp"
#include "kernels/cross_entropy.hpp"
#include "kernels/embedding.hpp"
#include "kernels/gemm.hpp"
#include "kernels/global_norm.hpp"
#include "kernels/permute.hpp"
#include "kernels/rmsnorm.hpp"
#include "kernels/rope.hpp"
#include "kernels/router.hpp"
#include "kernels/swiglu.hpp"

using namespace exa::test;
namespace ek = exa::kernels;
using exa::index_t;

namespace {

template <class T>
using V1 = Kokkos::View<T*, Kokkos::LayoutRight, TestDevice>;
template <class T>
using V2 = Kokkos::View<T**, Kokkos::LayoutRight, TestDevice>;
template <class T>
using V3 = Kokkos::View<T***, Kokkos::LayoutRight, TestDevice>;
template <class T>
using V4 = Kokkos::View<T****, Kokkos::LayoutRight, TestDevice>;

// An instance of Exec other than the default one where the backend has such
// a thing (CUDA: its own stream), else Exec{}.
template <class Exec>
struct OwnInstance {
  Exec exec{};
};

#if defined(KOKKOS_ENABLE_CUDA)
template <>
struct OwnInstance<Kokkos::Cuda> {
  cudaStream_t stream = nullptr;
  Kokkos::Cuda exec;
  OwnInstance() : stream(make_stream()), exec(stream) {}
  ~OwnInstance() {
    exec.fence();
    exec = Kokkos::Cuda();  // drop the last reference before the stream goes
    cudaStreamDestroy(stream);
  }
  OwnInstance(const OwnInstance&) = delete;
  OwnInstance& operator=(const OwnInstance&) = delete;
  static cudaStream_t make_stream() {
    cudaStream_t s = nullptr;
    EXPECT_EQ(cudaStreamCreate(&s), cudaSuccess);
    return s;
  }
};
#endif

// Same shape and the same bytes (so -0.0 vs +0.0 or a different NaN fails);
// an all-zero result would mean the kernel wrote nothing, so it fails too.
template <class A, class B>
void expect_same_bits(const A& a, const B& b, const std::string& what) {
  auto ha = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), a);
  auto hb = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), b);
  ASSERT_EQ(ha.span(), hb.span()) << what;
  ASSERT_GT(ha.span(), 0u) << what << ": nothing to compare";
  bool any_nonzero = false;
  for (std::size_t i = 0; i < ha.span(); ++i) any_nonzero |= ek::checksum_bits(ha.data()[i]) != 0;
  EXPECT_TRUE(any_nonzero) << what << ": all zero";
  using T = typename A::non_const_value_type;
  for (std::size_t i = 0; i < ha.span(); ++i) {
    if (std::memcmp(ha.data() + i, hb.data() + i, sizeof(T)) != 0) {
      ADD_FAILURE() << what << ": element " << i << " differs: bits " << std::hex
                    << ek::checksum_bits(ha.data()[i]) << " (default) vs " << ek::checksum_bits(hb.data()[i])
                    << " (instance)";
      return;
    }
  }
}

void expect_same_bits(double a, double b, const std::string& what) {
  EXPECT_EQ(std::memcmp(&a, &b, sizeof a), 0) << what << ": " << a << " (default) vs " << b << " (instance)";
}

// Outputs of one run of a chain; `run(exec...)` with no argument takes every
// kernel's default instance, with one argument passes it to every kernel.
struct LinearChain {
  index_t N = 37, in = 24, out = 19;
  V2<float> x = V2<float>("x", N, in), W = V2<float>("W", out, in), dy = V2<float>("dy", N, out);
  V1<float> w = V1<float>("w", in);
  struct Out {
    V2<float> h, y, dh, dx;
    V2<float> dW;
    V1<float> rstd, dw;
  };
  LinearChain() {
    fill_uniform(x, 1);
    fill_uniform(W, 2);
    fill_uniform(dy, 3);
    fill_uniform(w, 4, 0.5, 1.5);
  }
  template <class... E>
  Out run(const E&... exec) const {
    Out o{V2<float>("h", N, in),  V2<float>("y", N, out),  V2<float>("dh", N, in), V2<float>("dx", N, in),
          V2<float>("dW", out, in), V1<float>("rstd", N), V1<float>("dw", in)};
    // h = rmsnorm(x), y = h W^T, then back through both.
    ek::rmsnorm_forward(x, w, o.h, o.rstd, 1e-5, exec...);
    ek::linear_forward(o.h, W, o.y, false, exec...);
    ek::linear_backward(o.h, W, dy, o.dh, o.dW, false, false, exec...);
    ek::linear_backward(o.h, W, dy, o.dh, o.dW, true, true, exec...);  // accumulating forms too
    ek::rmsnorm_backward(x, w, o.rstd, o.dh, o.dx, o.dw, false, false, exec...);
    return o;
  }
};

template <class Exec>
void check_own_instance() {
  OwnInstance<Exec> inst;
#if defined(KOKKOS_ENABLE_CUDA)
  if constexpr (std::is_same<Exec, Kokkos::Cuda>::value) {
    EXPECT_NE(inst.exec.cuda_stream(), Kokkos::Cuda().cuda_stream());
    EXPECT_TRUE(ek::detail::is_own_stream(inst.exec));
    EXPECT_FALSE(ek::detail::is_own_stream(Exec()));
    return;
  }
#endif
  EXPECT_FALSE(ek::detail::is_own_stream(inst.exec));
}

}  // namespace

// What the gemm wrapper's Kokkos Kernels 3.4 fallback keys its fences on.
TEST(ExecInstance, OwnInstanceHasItsOwnStreamOnCuda) { check_own_instance<TestExec>(); }

TEST(ExecInstance, RmsnormAndLinearMatchDefaultBitForBit) {
  const LinearChain chain;
  const auto a = chain.run();
  OwnInstance<TestExec> inst;
  const auto b = chain.run(inst.exec);
  inst.exec.fence();
  expect_same_bits(a.h, b.h, "rmsnorm h");
  expect_same_bits(a.rstd, b.rstd, "rmsnorm rstd");
  expect_same_bits(a.y, b.y, "linear y");
  expect_same_bits(a.dh, b.dh, "linear dx");
  expect_same_bits(a.dW, b.dW, "linear dW");
  expect_same_bits(a.dx, b.dx, "rmsnorm dx");
  expect_same_bits(a.dw, b.dw, "rmsnorm dw");
}

TEST(ExecInstance, AttentionMatchesDefaultBitForBit) {
  const int B = 2, T = 19, H = 4, Hkv = 2, hd = 8;
  V4<float> q("q", B, T, H, hd), k("k", B, T, Hkv, hd), v("v", B, T, Hkv, hd), dout("dout", B, T, H, hd);
  fill_uniform(q, 11);
  fill_uniform(k, 12);
  fill_uniform(v, 13);
  fill_uniform(dout, 14);
  const ek::AttentionTiles tiles{4, 8, 8};  // many partial tiles
  struct Out {
    V4<float> out, dq, dk, dv;
    V3<float> lse;
  };
  // Both the dispatching entry points and the team kernels (the device path,
  // which host backends only reach through attention_detail).
  auto run = [&](bool team, const auto&... exec) {
    Out o{V4<float>("out", B, T, H, hd), V4<float>("dq", B, T, H, hd), V4<float>("dk", B, T, Hkv, hd),
          V4<float>("dv", B, T, Hkv, hd), V3<float>("lse", B, H, T)};
    if (team) {
      ek::attention_detail::forward_team(q, k, v, o.out, o.lse, tiles, exec...);
      ek::attention_detail::backward_team(dout, q, k, v, o.out, o.lse, o.dq, o.dk, o.dv, tiles, exec...);
    } else {
      ek::attention_forward(q, k, v, o.out, o.lse, tiles, exec...);
      ek::attention_backward(dout, q, k, v, o.out, o.lse, o.dq, o.dk, o.dv, tiles, exec...);
    }
    return o;
  };
  OwnInstance<TestExec> inst;
  for (bool team : {false, true}) {
    const std::string path = team ? "team " : "dispatch ";
    const auto a = run(team);
    const auto b = run(team, inst.exec);
    inst.exec.fence();
    expect_same_bits(a.out, b.out, path + "out");
    expect_same_bits(a.lse, b.lse, path + "lse");
    expect_same_bits(a.dq, b.dq, path + "dq");
    expect_same_bits(a.dk, b.dk, path + "dk");
    expect_same_bits(a.dv, b.dv, path + "dv");
  }
}

TEST(ExecInstance, CrossEntropyMatchesDefaultBitForBit) {
  const index_t N = 29, V = 53;
  V2<float> logits("logits", N, V);
  fill_uniform(logits, 21, -4.0, 4.0);
  V1<std::int32_t> targets("targets", N);
  {
    auto h = Kokkos::create_mirror_view(targets);
    for (index_t n = 0; n < N; ++n) h(n) = n % 7 == 3 ? -1 : static_cast<std::int32_t>((n * 17) % V);
    Kokkos::deep_copy(targets, h);
  }
  struct Out {
    ek::CrossEntropySum sum;
    double mean = 0;
    V1<float> lse, lse_rows, losses;
    V2<float> dlogits;
  };
  auto run = [&](const auto&... exec) {
    Out o{{}, 0, V1<float>("lse", N), V1<float>("lse_rows", N), V1<float>("losses", N), V2<float>("dl", N, V)};
    o.sum = ek::cross_entropy_forward_sum(logits, targets, o.lse, exec...);
    o.mean = ek::cross_entropy_forward(logits, targets, o.lse, exec...);
    ek::cross_entropy_rows(logits, targets, o.lse_rows, o.losses, exec...);
    ek::cross_entropy_backward(logits, targets, o.lse, 0.75, o.sum.n_valid, o.dlogits, exec...);
    return o;
  };
  const auto a = run();
  OwnInstance<TestExec> inst;
  const auto b = run(inst.exec);
  inst.exec.fence();
  EXPECT_EQ(a.sum.n_valid, b.sum.n_valid);
  EXPECT_EQ(a.sum.n_valid, N - 4);  // rows 3, 10, 17, 24 are ignored
  expect_same_bits(a.sum.loss_sum, b.sum.loss_sum, "loss sum");
  expect_same_bits(a.mean, b.mean, "mean loss");
  expect_same_bits(a.lse, b.lse, "lse");
  expect_same_bits(a.lse_rows, b.lse_rows, "rows lse");
  expect_same_bits(a.losses, b.losses, "row losses");
  expect_same_bits(a.dlogits, b.dlogits, "dlogits");
}

TEST(ExecInstance, RouterPermuteRoundMatchesDefaultBitForBit) {
  const int N = 41, E = 6, K = 2;
  // 12 < N*K/E = 13.7 assignments per expert on average: some must drop.
  const index_t d = 12, capacity = 12;
  V2<float> logits("logits", N, E), x("x", N, d), dy("dy", N, d);
  fill_uniform(logits, 31, -2.0, 2.0);
  fill_uniform(x, 32);
  fill_uniform(dy, 33);
  const ek::RouterOptions opt{true, 0.01, 0.001};
  struct Out {
    ek::RouterLosses losses;
    V2<float> probs, gates, dgates, dlogits, xp, y, dyp, dx;
    V1<float> lse;
    V2<int> topk;
    V1<int> counts;
    ek::PermutePlan<TestDevice> plan;
  };
  auto run = [&](const auto&... exec) {
    Out o;
    o.probs = V2<float>("probs", N, E);
    o.gates = V2<float>("gates", N, K);
    o.dgates = V2<float>("dgates", N, K);
    o.dlogits = V2<float>("dlogits", N, E);
    o.lse = V1<float>("lse", N);
    o.topk = V2<int>("topk", N, K);
    o.counts = V1<int>("counts", E);
    o.losses = ek::router_forward(logits, opt, o.probs, o.lse, o.topk, o.gates, o.counts, exec...);
    o.plan = ek::permute_plan(o.topk, E, capacity, exec...);
    o.xp = V2<float>("xp", o.plan.rows, d);
    o.y = V2<float>("y", N, d);
    o.dyp = V2<float>("dyp", o.plan.rows, d);
    o.dx = V2<float>("dx", N, d);
    // The expert FFN is the identity here: y = unpermute(permute(x)).
    ek::permute_forward(x, o.plan.token_of, o.xp, exec...);
    ek::unpermute_forward(o.xp, o.gates, o.plan.row_of, o.y, exec...);
    ek::unpermute_backward(dy, o.xp, o.gates, o.plan.row_of, o.dyp, o.dgates, exec...);
    ek::permute_backward(o.dyp, o.plan.row_of, o.dx, exec...);
    ek::router_backward(o.dgates, o.probs, o.lse, o.topk, o.gates, o.counts, opt, 1.0, 1.0, o.dlogits, exec...);
    return o;
  };
  const auto a = run();
  OwnInstance<TestExec> inst;
  const auto b = run(inst.exec);
  inst.exec.fence();
  expect_same_bits(a.losses.aux, b.losses.aux, "aux loss");
  expect_same_bits(a.losses.z, b.losses.z, "z loss");
  expect_same_bits(a.probs, b.probs, "probs");
  expect_same_bits(a.lse, b.lse, "router lse");
  expect_same_bits(a.topk, b.topk, "topk");
  expect_same_bits(a.gates, b.gates, "gates");
  expect_same_bits(a.counts, b.counts, "counts");
  ASSERT_EQ(a.plan.rows, b.plan.rows);
  EXPECT_GT(a.plan.dropped, 0) << "the capacity should drop some assignments";
  EXPECT_EQ(a.plan.dropped, b.plan.dropped);
  for (int e = 0; e <= E; ++e) EXPECT_EQ(a.plan.offsets_host(e), b.plan.offsets_host(e)) << "offset " << e;
  expect_same_bits(a.plan.counts, b.plan.counts, "plan counts");
  expect_same_bits(a.plan.routed, b.plan.routed, "plan routed");
  expect_same_bits(a.plan.row_of, b.plan.row_of, "row_of");
  expect_same_bits(a.plan.token_of, b.plan.token_of, "token_of");
  expect_same_bits(a.xp, b.xp, "xp");
  expect_same_bits(a.y, b.y, "y");
  expect_same_bits(a.dyp, b.dyp, "dyp");
  expect_same_bits(a.dgates, b.dgates, "dgates");
  expect_same_bits(a.dx, b.dx, "dx");
  expect_same_bits(a.dlogits, b.dlogits, "router dlogits");
}

// The remaining entry points, one chain: grouped and batched gemms, SwiGLU,
// RoPE (inline angles and table), embedding, conversion, AdamW, the squared
// norm and the checksum.
TEST(ExecInstance, RemainingKernelsMatchDefaultBitForBit) {
  const index_t rows = 23, in = 16, F = 10, E = 3, V = 9, Tn = 5, H = 2, hd = 8;
  const std::vector<index_t> offsets{0, 7, 7, 20};  // expert 1 is empty, rows 20.. unused
  V2<float> X("X", rows, in), dA("dA", rows, F);
  V3<float> W("W", E, 2 * F, in), Ab("Ab", E, 4, in), Bb("Bb", E, in, 3);
  V1<std::int32_t> tok("tok", rows);
  V2<float> table("table", V, in);
  fill_uniform(X, 41);
  fill_uniform(dA, 42);
  fill_uniform(W, 43);
  fill_uniform(Ab, 44);
  fill_uniform(Bb, 45);
  fill_uniform(table, 46);
  {
    auto h = Kokkos::create_mirror_view(tok);
    for (index_t n = 0; n < rows; ++n) h(n) = static_cast<std::int32_t>((n * 5) % V);
    Kokkos::deep_copy(tok, h);
  }
  struct Out {
    V2<float> emb, ab, g, dab, dX, p, m, s, back;
    V3<float> dW, Cb;
    V4<float> qd, qt;
    V2<float> dtable;
    V2<exa::bf16> half;
    double sq = 0;
    std::uint64_t sum = 0;
  };
  auto run = [&](const auto&... exec) {
    Out o;
    o.emb = V2<float>("emb", rows, in);
    o.ab = V2<float>("ab", rows, 2 * F);
    o.g = V2<float>("g", rows, F);
    o.dab = V2<float>("dab", rows, 2 * F);
    o.dX = V2<float>("dX", rows, in);
    o.dW = V3<float>("dW", E, 2 * F, in);
    o.Cb = V3<float>("Cb", E, 4, 3);
    o.dtable = V2<float>("dtable", V, in);
    o.half = V2<exa::bf16>("half", rows, in);
    o.back = V2<float>("back", rows, in);
    ek::embedding_forward(table, tok, o.emb, exec...);
    ek::grouped_linear_forward(o.emb, W, offsets, o.ab, false, exec...);
    // a = ab[:, :F], b = ab[:, F:] as column halves (strided rows).
    const auto a = Kokkos::subview(o.ab, Kokkos::ALL, Kokkos::make_pair(index_t(0), F));
    const auto b = Kokkos::subview(o.ab, Kokkos::ALL, Kokkos::make_pair(F, 2 * F));
    ek::swiglu_forward(a, b, o.g, exec...);
    const auto da = Kokkos::subview(o.dab, Kokkos::ALL, Kokkos::make_pair(index_t(0), F));
    const auto db = Kokkos::subview(o.dab, Kokkos::ALL, Kokkos::make_pair(F, 2 * F));
    ek::swiglu_backward(a, b, dA, da, db, exec...);
    ek::grouped_linear_backward(o.emb, W, o.dab, offsets, o.dX, o.dW, false, false, exec...);
    ek::embedding_backward(tok, o.dX, o.dtable, false, exec...);
    ek::gemm_batched('N', 'N', 1.0f, Ab, Bb, 0.0f, o.Cb, exec...);
    // RoPE with inline angles and with a table, forward then backward.
    o.qd = V4<float>("qd", 1, Tn, H, hd);
    o.qt = V4<float>("qt", 1, Tn, H, hd);
    fill_uniform(o.qd, 47);
    fill_uniform(o.qt, 47);
    ek::rope_forward(o.qd, 10000.0, 3, exec...);
    ek::rope_backward(o.qd, 500000.0, 1, exec...);
    const auto tab = ek::make_rope_table<float, TestDevice>(Tn + 3, hd, 10000.0, exec...);
    ek::rope_forward(o.qt, tab, 3, exec...);
    ek::rope_backward(o.qt, tab, 2, exec...);
    ek::fp32_to_bf16(o.dX, o.half, exec...);
    ek::bf16_to_fp32(o.half, o.back, exec...);
    o.p = V2<float>("p", rows, in);
    o.m = V2<float>("m", rows, in);
    o.s = V2<float>("s", rows, in);
    Kokkos::deep_copy(exec..., o.p, X);
    ek::AdamWHyper hyp;
    hyp.step = 3;
    hyp.grad_scale = 0.5;
    ek::adamw_step(o.p, o.back, o.m, o.s, hyp, exec...);
    o.sq = ek::global_sq_norm(o.p, exec...);
    o.sum = ek::checksum(o.p, 5, exec...);
    return o;
  };
  const auto a = run();
  OwnInstance<TestExec> inst;
  const auto b = run(inst.exec);
  inst.exec.fence();
  expect_same_bits(a.emb, b.emb, "embedding forward");
  expect_same_bits(a.ab, b.ab, "grouped linear forward");
  expect_same_bits(a.g, b.g, "swiglu forward");
  expect_same_bits(a.dab, b.dab, "swiglu backward");
  expect_same_bits(a.dX, b.dX, "grouped linear dX");
  expect_same_bits(a.dW, b.dW, "grouped linear dW");
  expect_same_bits(a.dtable, b.dtable, "embedding backward");
  expect_same_bits(a.Cb, b.Cb, "gemm_batched");
  expect_same_bits(a.qd, b.qd, "rope (inline angles)");
  expect_same_bits(a.qt, b.qt, "rope (table)");
  expect_same_bits(a.half, b.half, "fp32_to_bf16");
  expect_same_bits(a.back, b.back, "bf16_to_fp32");
  expect_same_bits(a.p, b.p, "adamw param");
  expect_same_bits(a.m, b.m, "adamw exp_avg");
  expect_same_bits(a.s, b.s, "adamw exp_avg_sq");
  expect_same_bits(a.sq, b.sq, "global_sq_norm");
  EXPECT_EQ(a.sum, b.sum) << "checksum";
  EXPECT_NE(a.sum, 0u);
}
