#pragma once
// The single-rank TokenDispatcher: a permutation plan, one grouped gemm per
// expert (kernels/gemm.hpp) and the gate-weighted unpermute. Its backward
// scratch (N*k permuted rows) is shared by every MoE layer of the stage:
// one backward runs at a time. Under bf16 products it keeps the routed
// rows and activations in bf16 (stores_bf16).
#include <type_traits>
#include <vector>

#include "core/profiling.hpp"
#include "kernels/convert.hpp"
#include "kernels/gemm.hpp"
#include "kernels/permute.hpp"
#include "kernels/swiglu.hpp"
#include "model/seams/lora_ops.hpp"
#include "model/seams/token_dispatcher.hpp"

namespace exa::model {

template <class T, class D = Device>
class LocalTokenDispatcher final : public TokenDispatcher<T, D> {
 public:
  using typename TokenDispatcher<T, D>::V2;

  // Every one of the n_experts experts lives on this rank.
  explicit LocalTokenDispatcher(int n_experts) : n_experts_(n_experts) {}

  using typename TokenDispatcher<T, D>::Meanwhile;

  void forward(LayerContext<T, D>& c, const LayerWeights<T, D>& w, std::int64_t capacity, const V2& xn,
               const V2& y, const Meanwhile& meanwhile = {}) override {
    namespace K = kernels;
    if (meanwhile) meanwhile();  // nothing to overlap on one rank
    // Reuses the context's plan buffers; the keep mask, when set, replaces the capacity.
    K::permute_plan(c.plan, c.topk, n_experts_, capacity, exec_of<decltype(c.topk)>{}, c.capacity_keep);
    const auto off = offsets(c);
    c.mark_experts_used(off);
    if constexpr (std::is_same<T, float>::value) {
      if (experts_in_bf16(w)) {
        forward16(c, w, off, xn, y);
        return;
      }
    }
    const Kept k(ensure32(c, w, xn.extent(1)));
    K::permute_forward(xn, c.plan.token_of, k.xp);
    K::grouped_linear_forward(k.xp, w.w1, off, k.ea);
    K::grouped_linear_forward(k.xp, w.w3, off, k.eb);
    // Each expert's adapters (LoRA), their input dropout keyed per projection.
    const double p = w.lora_dropout;
    const auto key = [&](std::uint64_t proj) { return lora::key(c.lora_key, proj); };
    if (w.lora_w1.a.data()) {
      lora::grouped_forward<T, D>(k.xp, w.lora_w1, w.lora_scale, off, k.ea, lora_, p, key(101));
      lora::grouped_forward<T, D>(k.xp, w.lora_w3, w.lora_scale, off, k.eb, lora_, p, key(103));
    }
    if constexpr (std::is_same<T, float>::value) {
      if (K::matmul_precision() == K::MatmulPrecision::bf16) {  // what forward16 would store
        K::round_through_bf16(k.ea);
        K::round_through_bf16(k.eb);
      }
    }
    K::swiglu_forward(k.ea, k.eb, k.eh);
    K::grouped_linear_forward(k.eh, w.w2, off, k.yp);
    if (w.lora_w2.a.data())
      lora::grouped_forward<T, D>(k.eh, w.lora_w2, w.lora_scale, off, k.yp, lora_, p, key(102));
    K::unpermute_forward(k.yp, c.gates, c.plan.row_of, y);
  }

  void backward(LayerContext<T, D>& c, const LayerWeights<T, D>& w, const LayerWeights<T, D>& g, const V2& dy,
                const V2& dxn, const V2& dgates, const Meanwhile& meanwhile = {}) override {
    namespace K = kernels;
    if (meanwhile) meanwhile();
    const bool b16 = experts_in_bf16(w);  // as forward stored them
    ensure_scratch(c.topk.extent(0) * c.topk.extent(1), dy.extent(1), w.w1.extent(1), b16);
    const auto rows = Kokkos::make_pair(index_t(0), c.plan.rows);
    // dyp is dead once the w2 products have read it, before dxp is written:
    // they share a buffer. So do deh and dea: the SwiGLU's backward reads
    // each element before it writes it.
    const auto dxp = Kokkos::subview(dxp_, rows, Kokkos::ALL);
    const auto dyp = dxp;
    const auto deh = Kokkos::subview(deh_, rows, Kokkos::ALL);
    const auto off = offsets(c);
    const auto yp = Kokkos::subview(c.yp, rows, Kokkos::ALL);
    K::unpermute_backward(dy, yp, c.gates, c.plan.row_of, dyp, dgates);
    if constexpr (std::is_same<T, float>::value) {
      if (b16) {
        // dea, deb in bf16: the products they feed round them so anyway.
        const Kept16 k(c);
        const auto dea = Kokkos::subview(dea16_, rows, Kokkos::ALL), deb = Kokkos::subview(deb16_, rows, Kokkos::ALL);
        if (c.shared_cheap) K::swiglu_forward(k.ea, k.eb, k.eh);  // selective recompute
        K::grouped_linear_backward(k.eh, w.w2, dyp, off, deh, g.w2, true);
        K::swiglu_backward(k.ea, k.eb, deh, dea, deb);
        K::grouped_linear_backward(k.xp, w.w1, dea, off, dxp, g.w1, true, false);
        K::grouped_linear_backward(k.xp, w.w3, deb, off, dxp, g.w3, true, true);
        K::permute_backward(dxp, c.plan.row_of, dxn);  // overwrites dxn
        return;
      }
    }
    const auto dea = deh;
    const auto deb = Kokkos::subview(deb_, rows, Kokkos::ALL);
    const Kept k(c);
    const bool ad = w.lora_w1.a.data() != nullptr;
    const double s = w.lora_scale, p = w.lora_dropout;
    const auto key = [&](std::uint64_t proj) { return lora::key(c.lora_key, proj); };
    if (c.shared_cheap) K::swiglu_forward(k.ea, k.eb, k.eh);  // selective recompute
    K::grouped_linear_backward(k.eh, w.w2, dyp, off, deh, g.w2, true);
    if (ad) lora::grouped_backward<T, D>(k.eh, w.lora_w2, g.lora_w2, s, dyp, off, deh, lora_, p, key(102));
    K::swiglu_backward(k.ea, k.eb, deh, dea, deb);
    K::grouped_linear_backward(k.xp, w.w1, dea, off, dxp, g.w1, true, false);
    K::grouped_linear_backward(k.xp, w.w3, deb, off, dxp, g.w3, true, true);
    if (ad) {
      lora::grouped_backward<T, D>(k.xp, w.lora_w1, g.lora_w1, s, dea, off, dxp, lora_, p, key(101));
      lora::grouped_backward<T, D>(k.xp, w.lora_w3, g.lora_w3, s, deb, off, dxp, lora_, p, key(103));
    }
    K::permute_backward(dxp, c.plan.row_of, dxn);  // overwrites dxn
  }

  std::size_t scratch_bytes() const override {
    return (dxp_.span() + deb_.span() + deh_.span()) * sizeof(T) + (dea16_.span() + deb16_.span()) * sizeof(bf16);
  }

  // Where experts_in_bf16(w).
  bool stores_bf16() const override { return true; }

 private:
  using H2 = typename LayerContext<T, D>::H2;

  // forward's bf16 storage: xp16 is the rows as the products round them;
  // the first products go to fp32 scratch (deh_, one after the other, free
  // until this layer's backward) and are kept rounded in ea16, eb16, from
  // which the SwiGLU computes eh16 (and selective recompute computes it again).
  void forward16(LayerContext<T, D>& c, const LayerWeights<T, D>& w, const std::vector<index_t>& off, const V2& xn,
                 const V2& y) {
    namespace K = kernels;
    const std::size_t cap = c.topk.extent(0) * c.topk.extent(1), d = xn.extent(1), F = w.w1.extent(1);
    ensure16(c, cap, d, F);
    ensure_scratch(cap, d, F, true);
    const Kept16 k(c);
    const auto rows = Kokkos::make_pair(index_t(0), c.plan.rows);
    const auto product = Kokkos::subview(deh_, rows, Kokkos::ALL);
    const auto yp = Kokkos::subview(c.yp, rows, Kokkos::ALL);
    K::permute_forward(xn, c.plan.token_of, k.xp);
    K::grouped_linear_forward(k.xp, w.w1, off, product);
    K::fp32_to_bf16(product, k.ea);
    K::grouped_linear_forward(k.xp, w.w3, off, product);
    K::fp32_to_bf16(product, k.eb);
    K::swiglu_forward(k.ea, k.eb, k.eh);
    K::grouped_linear_forward(k.eh, w.w2, off, yp);
    K::unpermute_forward(yp, c.gates, c.plan.row_of, y);
  }

  // The context's permuted-row buffers cut to the plan's kept rows.
  struct Kept {
    V2 xp, ea, eb, eh, yp;
    explicit Kept(const LayerContext<T, D>& c) {
      const auto rows = Kokkos::make_pair(index_t(0), c.plan.rows);
      xp = Kokkos::subview(c.xp, rows, Kokkos::ALL);
      ea = Kokkos::subview(c.ea, rows, Kokkos::ALL);
      eb = Kokkos::subview(c.eb, rows, Kokkos::ALL);
      eh = Kokkos::subview(c.eh, rows, Kokkos::ALL);
      yp = Kokkos::subview(c.yp, rows, Kokkos::ALL);
    }
  };
  struct Kept16 {
    H2 xp, ea, eb, eh;
    explicit Kept16(const LayerContext<T, D>& c) {
      const auto rows = Kokkos::make_pair(index_t(0), c.plan.rows);
      xp = Kokkos::subview(c.xp16, rows, Kokkos::ALL);
      ea = Kokkos::subview(c.ea16, rows, Kokkos::ALL);
      eb = Kokkos::subview(c.eb16, rows, Kokkos::ALL);
      eh = Kokkos::subview(c.eh16, rows, Kokkos::ALL);
    }
  };
  // A context allocated for the other storage (the precision or the
  // adapters changed since) gets the views this one needs.
  static const LayerContext<T, D>& ensure32(LayerContext<T, D>& c, const LayerWeights<T, D>& w, std::size_t d) {
    const std::size_t cap = c.topk.extent(0) * c.topk.extent(1), F = w.w1.extent(1);
    if (c.xp.extent(0) < cap) c.xp = V2("exa::model::xp", cap, d);
    if (c.ea.extent(0) < cap) c.ea = V2("exa::model::ea", cap, F);
    if (c.eb.extent(0) < cap) c.eb = V2("exa::model::eb", cap, F);
    if (c.eh.extent(0) < cap) c.eh = V2("exa::model::eh", cap, F);
    return c;
  }
  static void ensure16(LayerContext<T, D>& c, std::size_t cap, std::size_t d, std::size_t F) {
    if (c.xp16.extent(0) < cap) c.xp16 = H2("exa::model::xp16", cap, d);
    if (c.ea16.extent(0) < cap) c.ea16 = H2("exa::model::ea16", cap, F);
    if (c.eb16.extent(0) < cap) c.eb16 = H2("exa::model::eb16", cap, F);
    if (c.eh16.extent(0) < cap) c.eh16 = H2("exa::model::eh16", cap, F);
  }
  static std::vector<index_t> offsets(const LayerContext<T, D>& c) {
    const auto& o = c.plan.offsets_host;
    return std::vector<index_t>(o.data(), o.data() + o.extent(0));
  }
  // Sized for the largest micro-batch seen (rows <= N*k); the gradients of
  // ea and eb in bf16 (b16) or fp32 (deb_; dea shares deh_).
  void ensure_scratch(std::size_t rows, std::size_t d, std::size_t F, bool b16) {
    if (dxp_.extent(0) < rows || dxp_.extent(1) != d || deh_.extent(1) != F) {
      dxp_ = V2("exa::model::dxp", rows, d);
      deh_ = V2("exa::model::deh", rows, F);
      deb_ = V2();
      dea16_ = deb16_ = H2();
    }
    if (b16 && dea16_.extent(0) < rows) {
      dea16_ = H2("exa::model::dea16", rows, F);
      deb16_ = H2("exa::model::deb16", rows, F);
    }
    if (!b16 && deb_.extent(0) < rows) deb_ = V2("exa::model::deb", rows, F);
  }

  int n_experts_;
  V2 dxp_, deh_, deb_;  // dyp shares dxp_, dea deh_
  H2 dea16_, deb16_;
  lora::Scratch<T, D> lora_;  // the experts' adapters' products
};

}  // namespace exa::model
