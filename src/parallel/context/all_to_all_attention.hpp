#pragma once
// AllToAllAttention: the CoreAttention seam under context parallelism,
// parallel.cp_mode = "a2a" (DeepSpeed-Ulysses; docs/architecture.md,
// "Context parallelism"). Rank r of the Cp group holds its zigzag rows of
// every head (zigzag.hpp). One all-to-all turns them into the whole
// sequences of a share of the heads (query heads [j·H/cp, (j+1)·H/cp) and
// key/value heads [j·Hkv/cp, ...) on rank j, which keeps GQA's query-to-kv
// map inside each rank), the local kernel attends over the whole sequence,
// and one all-to-all brings out (and lse) back to the rows' owners. The
// backward repeats the first exchange for q, k, v, out, dout and lse, runs
// the local backward and sends dq, dk, dv back. Needs cp | Hkv (the deck
// check refuses otherwise). Waits are charged to "comm/context/a2a".
#include <memory>
#include <string>
#include <utility>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/traffic_ledger.hpp"
#include "core/error.hpp"
#include "core/profiling.hpp"
#include "kernels/attention.hpp"
#include "model/seams/core_attention.hpp"
#include "parallel/context/chunk_ops.hpp"
#include "parallel/context/zigzag_attention.hpp"

namespace exa::parallel::context {

template <class T, class D = Device>
class AllToAllAttention final : public ZigzagAttention<T, D> {
  using Base = ZigzagAttention<T, D>;
  using typename Base::Shape;
  using Base::comm_;
  using Base::tiles_;
  using Base::zz_;

 public:
  using typename Base::A4;
  using typename Base::Lse;

  AllToAllAttention(std::shared_ptr<comm::Communicator> cp_comm, kernels::AttentionTiles tiles = {})
      : Base(std::move(cp_comm), tiles) {}

  void forward(const A4& q, const A4& k, const A4& v, const A4& out, const Lse& lse,
               model::AttentionPositions at) const override {
    const Shape s = shape(q, k);
    const auto full = to_heads({q, k, v}, s);
    const index_t Tn = s.c * 2 * zz_.cp;
    A4 fo = make(s.B, Tn, s.H / zz_.cp, s.hd);
    Lse fl("exa::context::a2a_lse", s.B, s.H / zz_.cp, Tn);
    kernels::attention_forward(full[0], full[1], full[2], fo, fl, tiles_, documents(at));
    L4 fl4("exa::context::a2a_lse_rows", s.B, Tn, s.H / zz_.cp, 1);
    ops::lse_as_rows(fl, fl4, true);
    L4 l4("exa::context::lse_rows", s.B, 2 * s.c, s.H, 1);
    to_rows({fo, A4(fl4.data(), s.B, Tn, s.H / zz_.cp, 1)}, {out, A4(l4.data(), s.B, 2 * s.c, s.H, 1)}, s);
    ops::lse_as_rows(lse, l4, false);
  }

  void backward(const A4& dout, const A4& q, const A4& k, const A4& v, const A4& out, const Lse& lse, const A4& dq,
                const A4& dk, const A4& dv, model::AttentionPositions at) const override {
    const Shape s = shape(q, k);
    L4 l4("exa::context::lse_rows", s.B, 2 * s.c, s.H, 1);
    ops::lse_as_rows(lse, l4, true);
    const auto full = to_heads({q, k, v, out, dout, A4(l4.data(), s.B, 2 * s.c, s.H, 1)}, s);
    const index_t Tn = s.c * 2 * zz_.cp, Hl = s.H / zz_.cp, Hkvl = s.Hkv / zz_.cp;
    Lse fl("exa::context::a2a_lse", s.B, Hl, Tn);
    ops::lse_as_rows(fl, full[5], false);
    A4 fdq = make(s.B, Tn, Hl, s.hd), fdk = make(s.B, Tn, Hkvl, s.hd), fdv = make(s.B, Tn, Hkvl, s.hd);
    kernels::attention_backward(full[4], full[0], full[1], full[2], full[3], fl, fdq, fdk, fdv, tiles_,
                                documents(at));
    to_rows({fdq, fdk, fdv}, {dq, dk, dv}, s);
  }

 private:
  // The whole sequences sit at positions 0.. after the exchange: the
  // documents (packed sequences) apply as they are.
  static kernels::AttentionOffsets documents(const model::AttentionPositions& at) {
    return {0, 0, at.doc_start, at.doc_end, at.doc_stride};
  }
  using L4 = Kokkos::View<T****, Layout, D>;
  using Buf = Kokkos::View<T*, Layout, D>;
  Shape shape(const A4& q, const A4& k) const {
    const Shape s = Base::shape(q, k);
    EXA_REQUIRE(s.Hkv % zz_.cp == 0 && s.H % zz_.cp == 0,
                "AllToAllAttention: cp = {} must divide the {} key/value heads (and the {} query heads) of this "
                "rank; use parallel.cp_mode = \"ring\"",
                zz_.cp, s.Hkv, s.H);
    return s;
  }
  // A managed [B,T,h,w] tensor seen through the seam's unmanaged type (the
  // allocation is kept alive by keep_).
  A4 make(index_t B, index_t Tn, index_t h, index_t w) const {
    L4 m("exa::context::a2a_full", B, Tn, h, w);
    keep_.push_back(m);
    return A4(m.data(), B, Tn, h, w);
  }
  // One all-to-all over the Cp group of equal blocks of n elements per peer.
  void exchange(const Buf& send, const Buf& recv, index_t n) const {
    Kokkos::fence();
    const int P = zz_.cp;
    std::vector<int> counts(P, int(n)), displs(P);
    for (int j = 0; j < P; ++j) displs[j] = int(j * n);
    ScopedRegion region("comm/context/a2a");
    comm::TrafficLedger::sent(comm::Traffic::Cp, double(P - 1) * double(n) * sizeof(typename Buf::value_type));
    comm_->alltoallv(send, counts, displs, recv, counts, displs);
  }

  // Each tensor [B, 2c, h, w] (this rank's rows, all h heads) -> [B, T, h/cp, w]
  // (every row, this rank's share of the heads).
  std::vector<A4> to_heads(const std::vector<A4>& xs, const Shape& s) const {
    keep_.clear();
    const int P = zz_.cp;
    index_t per = 0;  // elements per peer
    for (const auto& x : xs) per += index_t(x.span()) / P;
    Buf send("exa::context::a2a_send", per * P), recv("exa::context::a2a_recv", per * P);
    for (int j = 0; j < P; ++j) {
      index_t off = j * per;
      for (const auto& x : xs) {
        const index_t hs = x.extent(2) / P;
        ops::head_block(x, send.data() + off, j * hs, hs, true);
        off += index_t(x.span()) / P;
      }
    }
    exchange(send, recv, per);
    std::vector<A4> full;
    const index_t Tn = s.c * 2 * P;
    for (const auto& x : xs) full.push_back(make(s.B, Tn, x.extent(2) / P, x.extent(3)));
    for (int i = 0; i < P; ++i) {
      index_t off = i * per;
      for (std::size_t t = 0; t < xs.size(); ++t) {
        ops::row_block(full[t], recv.data() + off, s.c, zz_.chunk_of(i, 0), zz_.chunk_of(i, 1), false);
        off += index_t(xs[t].span()) / P;
      }
    }
    return full;
  }
  // The reverse: each full [B, T, h/cp, w] back into the rows of its owner, ys[t] [B, 2c, h, w].
  void to_rows(const std::vector<A4>& full, const std::vector<A4>& ys, const Shape& s) const {
    const int P = zz_.cp;
    index_t per = 0;
    for (const auto& y : ys) per += index_t(y.span()) / P;
    Buf send("exa::context::a2a_send", per * P), recv("exa::context::a2a_recv", per * P);
    for (int i = 0; i < P; ++i) {
      index_t off = i * per;
      for (std::size_t t = 0; t < full.size(); ++t) {
        ops::row_block(full[t], send.data() + off, s.c, zz_.chunk_of(i, 0), zz_.chunk_of(i, 1), true);
        off += index_t(ys[t].span()) / P;
      }
    }
    exchange(send, recv, per);
    for (int j = 0; j < P; ++j) {
      index_t off = j * per;
      for (const auto& y : ys) {
        const index_t hs = y.extent(2) / P;
        ops::head_block(y, recv.data() + off, j * hs, hs, false);
        off += index_t(y.span()) / P;
      }
    }
    Kokkos::fence();
    keep_.clear();
  }

  mutable std::vector<L4> keep_;  // this call's whole-sequence tensors
};

}  // namespace exa::parallel::context
