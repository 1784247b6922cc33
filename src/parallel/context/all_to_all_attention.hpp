#pragma once
// AllToAllAttention: the CoreAttention seam under context parallelism,
// parallel.cp_mode = "a2a" (DeepSpeed-Ulysses; docs/architecture.md,
// "Context parallelism"). Rank r of the Cp group holds its zigzag rows of
// every head (zigzag.hpp). One all-to-all turns them into the whole
// sequences of a share of the heads (query heads [j·H/cp, (j+1)·H/cp) and
// key/value heads [j·Hkv/cp, ...) on rank j, which keeps GQA's query-to-kv
// map inside each rank), the attention one rank would run (the model's
// own seam: full causal, or LSH, which needs every key of a sequence to
// sort its buckets) attends over the whole sequences of those heads, and
// one all-to-all brings out (and lse) back to the rows' owners. The
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

  // `local`: the attention of whole sequences (the seam the model had
  // before context parallelism replaced it).
  AllToAllAttention(std::shared_ptr<comm::Communicator> cp_comm,
                    std::shared_ptr<const model::CoreAttention<T, D>> local, kernels::AttentionTiles tiles = {})
      : Base(std::move(cp_comm), tiles), local_(std::move(local)) {
    EXA_REQUIRE(local_ != nullptr, "AllToAllAttention: no whole-sequence attention given");
  }

  void forward(const A4& q, const A4& k, const A4& v, const A4& out, const Lse& lse,
               model::AttentionPositions at) const override {
    const Shape s = shape(q, k);
    pool_ = &pools_[0];
    used_ = 0;
    const auto full = to_heads({q, k, v}, s);
    const index_t Tn = s.c * 2 * zz_.cp;
    A4 fo = make(s.B, Tn, s.H / zz_.cp, s.hd);
    const Lse& fl = reuse(lse_full_, "exa::context::a2a_lse", s.B, s.H / zz_.cp, Tn);
    local_->forward(full[0], full[1], full[2], fo, fl, whole(at, s));
    A4 fl4 = make(s.B, Tn, s.H / zz_.cp, 1);
    ops::lse_as_rows(fl, fl4, true);
    A4 l4 = make(s.B, 2 * s.c, s.H, 1);
    to_rows({fo, fl4}, {out, l4}, s);
    ops::lse_as_rows(lse, l4, false);
  }

  void backward(const A4& dout, const A4& q, const A4& k, const A4& v, const A4& out, const Lse& lse, const A4& dq,
                const A4& dk, const A4& dv, model::AttentionPositions at) const override {
    const Shape s = shape(q, k);
    pool_ = &pools_[1];
    used_ = 0;
    A4 l4 = make(s.B, 2 * s.c, s.H, 1);
    ops::lse_as_rows(lse, l4, true);
    const auto full = to_heads({q, k, v, out, dout, l4}, s);
    const index_t Tn = s.c * 2 * zz_.cp, Hl = s.H / zz_.cp, Hkvl = s.Hkv / zz_.cp;
    const Lse& fl = reuse(lse_full_, "exa::context::a2a_lse", s.B, Hl, Tn);
    ops::lse_as_rows(fl, full[5], false);
    A4 fdq = make(s.B, Tn, Hl, s.hd), fdk = make(s.B, Tn, Hkvl, s.hd), fdv = make(s.B, Tn, Hkvl, s.hd);
    local_->backward(full[4], full[0], full[1], full[2], full[3], fl, fdq, fdk, fdv, whole(at, s));
    to_rows({fdq, fdk, fdv}, {dq, dk, dv}, s);
  }

 private:
  // The whole sequences sit at positions 0.. after the exchange: the
  // documents (packed sequences) apply as they are. This rank's key/value
  // heads are its share of the caller's, so their global index moves by
  // that share's first.
  model::AttentionPositions whole(const model::AttentionPositions& at, const Shape& s) const {
    model::AttentionPositions w = at;
    w.q_offset = w.k_offset = 0;
    w.kv_head_begin = at.kv_head_begin + std::int64_t(zz_.rank) * (s.Hkv / zz_.cp);
    return w;
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
  // A [B,T,h,w] scratch tensor seen through the seam's unmanaged type: the
  // call's next slot of a pool kept between calls, so that the step's many
  // attention calls neither allocate nor touch fresh pages.
  A4 make(index_t B, index_t Tn, index_t h, index_t w) const {
    if (used_ == pool_->size()) pool_->emplace_back();
    const L4& m = reuse((*pool_)[used_++], "exa::context::a2a_full", B, Tn, h, w);
    return A4(m.data(), B, Tn, h, w);
  }
  // v, reallocated (uninitialised: every element is written before it is
  // read) only when its extents change.
  template <class V, class... N>
  static const V& reuse(V& v, const char* label, N... n) {
    const std::size_t want[] = {std::size_t(n)...};
    bool same = v.data() != nullptr;
    for (std::size_t i = 0; i < sizeof...(N); ++i) same = same && v.extent(i) == want[i];
    if (!same) v = V(Kokkos::view_alloc(Kokkos::WithoutInitializing, std::string(label)), n...);
    return v;
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
    const int P = zz_.cp;
    index_t per = 0;  // elements per peer
    for (const auto& x : xs) per += index_t(x.span()) / P;
    const Buf& send = reuse(send_[xs.size()], "exa::context::a2a_send", per * P);
    const Buf& recv = reuse(recv_[xs.size()], "exa::context::a2a_recv", per * P);
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
    const Buf& send = reuse(send_[ys.size()], "exa::context::a2a_send", per * P);
    const Buf& recv = reuse(recv_[ys.size()], "exa::context::a2a_recv", per * P);
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
  }

  // Scratch kept between calls: the whole-sequence tensors (a call's slots
  // from 0, one pool for the forward and one for the backward), the whole sequences' log-sum-exp, and the exchanges' buffers
  // by the number of tensors moved (in: 3 forward, 6 backward; out: 2
  // forward, 3 backward, which are as large as the forward's 3 in).
  mutable std::vector<L4> pools_[2];
  mutable std::vector<L4>* pool_ = nullptr;
  mutable std::size_t used_ = 0;
  mutable Lse lse_full_;
  mutable Buf send_[7], recv_[7];
  std::shared_ptr<const model::CoreAttention<T, D>> local_;
};

}  // namespace exa::parallel::context
