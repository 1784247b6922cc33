#pragma once
// RingAttention: the CoreAttention seam under context parallelism,
// parallel.cp_mode = "ring" (docs/architecture.md, "Context parallelism").
//
// Each of the cp ranks of the Cp group holds the zigzag chunks r and
// 2cp-1-r (zigzag.hpp) of every sequence: its queries, keys and values are
// [B, 2c, ., hd]. The key/value blocks travel round the ring (rank r sends
// to r+1, receives from r-1): at step s rank r holds the block of rank
// r - s, computes its queries against it while the next block is already in
// flight (nonblocking send/recv posted before the compute), and merges the
// partial result into its running output by log-sum-exp (online softmax).
// Each (query chunk, key chunk) pair is, by its chunk indices qi and ki,
// full (qi > ki), diagonal (qi = ki, the causal mask inside) or skipped
// (qi < ki): the attention kernels mask by the pair's explicit positions.
//
// Backward runs the ring again with the saved (merged) out and lse: each
// block's pass gives this rank's share of dq and of the block's dk, dv
// (attention.hpp: with the merged lse and out, the blocks' dq sum to the
// full dq and their dk, dv to the keys' full gradients). The dk/dv partial
// sums travel with the block, one step behind the keys: received from r-1,
// this rank's share added, sent on to r+1; after cp steps they reach the
// block's owner. No T x T matrix exists: only the kernels' score tiles.
//
// Head counts are this rank's; GQA (Hkv < H) as in the kernels. Every
// message is half of a ring shift (Communicator::isendrecv: one NCCL group
// on CUDA builds with comm.backend = "nccl"; staged through the host for
// device memory on MPI), tagged apart from other traffic on the Cp group;
// the waits are charged to the "comm/context/ring" phase (exposed ring
// communication).
#include <memory>
#include <optional>
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
class RingAttention final : public ZigzagAttention<T, D> {
  using Base = ZigzagAttention<T, D>;
  using typename Base::Shape;
  using Base::comm_;
  using Base::tiles_;
  using Base::zz_;

 public:
  using typename Base::A4;
  using typename Base::Lse;

  RingAttention(std::shared_ptr<comm::Communicator> cp_comm, kernels::AttentionTiles tiles = {})
      : Base(std::move(cp_comm), tiles) {}

  // (query, key) score pairs the forwards so far computed, summed over the
  // batch and the heads (the causal work: 4·hd FLOPs each in the forward).
  std::int64_t causal_pairs() const { return pairs_; }
  // Bytes of the ring's buffers (kept between calls of one shape).
  std::size_t buffer_bytes() const {
    if (!have_) return 0;
    std::size_t n = 0;
    for (const Buf* v : {&buf_.q_mem, &buf_.o_mem, &buf_.dout_mem, &buf_.dq_mem, &buf_.ob_mem, &buf_.dkb_mem,
                         &buf_.dvb_mem, &buf_.kv[0], &buf_.kv[1], &buf_.dkv[0], &buf_.dkv[1], &buf_.dkv[2]})
      n += v->span();
    n += 3 * buf_.lb.span();
    return n * sizeof(T);
  }

  void forward(const A4& q, const A4& k, const A4& v, const A4& out, const Lse& lse,
               model::AttentionPositions at) const override {
    const Shape sh = this->shape(q, k);
    auto& b = buffers(sh);
    pack(q, b.q, sh.c);
    pack_kv(k, v, b.kv[0], sh);
    for (int a = 0; a < 2; ++a) {
      ops::fill(b.o[a].data(), T(0), index_t(b.o[a].span()));
      ops::fill(b.l[a].data(), -kx::infinity<T>(), index_t(b.l[a].span()));
    }
    const int cp = zz_.cp, r = zz_.rank;
    for (int s = 0; s < cp; ++s) {
      const int src = (r - s + cp) % cp;
      Exchange x = s + 1 < cp ? post_kv(b, s) : Exchange{};
      const T* blk = b.kv[s % 2].data();
      for (int a = 0; a < 2; ++a)
        for (int kc = 0; kc < 2; ++kc) {
          const auto pos = pair(r, a, src, kc, sh.c, at);
          if (!pos) continue;
          kernels::attention_forward(b.q[a], kv_view(blk, 0, kc, sh), kv_view(blk, 1, kc, sh), b.ob, b.lb, tiles_,
                                     *pos);
          const bool diagonal = pos->q_offset == pos->k_offset;
          pairs_ += sh.B * sh.H * (diagonal ? sh.c * (sh.c + 1) / 2 : sh.c * sh.c);
          ops::merge(b.o[a], b.l[a], b.ob, b.lb);
        }
      wait(x);
    }
    for (int a = 0; a < 2; ++a) {
      ops::copy_rows(out, b.o[a], a * sh.c, false);
      ops::copy_lse(lse, b.l[a], a * sh.c, false);
    }
  }

  void backward(const A4& dout, const A4& q, const A4& k, const A4& v, const A4& out, const Lse& lse, const A4& dq,
                const A4& dk, const A4& dv, model::AttentionPositions at) const override {
    const Shape sh = this->shape(q, k);
    auto& b = buffers(sh);
    pack(q, b.q, sh.c);
    pack(dout, b.dout, sh.c);
    pack(out, b.o, sh.c);
    for (int a = 0; a < 2; ++a) {
      ops::copy_lse(lse, b.l[a], a * sh.c, true);
      ops::fill(b.dq[a].data(), T(0), index_t(b.dq[a].span()));
    }
    pack_kv(k, v, b.kv[0], sh);
    const int cp = zz_.cp, r = zz_.rank;
    const index_t nkv = kv_elems(sh);
    // Each step ends with one ring shift of the dk/dv sums: this step's block
    // (with this rank's share added) goes to r+1 while the next step's
    // partial sums arrive from r-1, as one exchange, so that on an ordered
    // transport every rank queues the same sequence of shifts.
    comm::Request dkv_shift;
    T* mine = b.dkv[0].data();  // this step's block: partial sums plus this rank's share
    T* sent = b.dkv[1].data();  // the previous step's, in flight to r+1
    T* in = b.dkv[2].data();    // the partial sums of this step's block, from r-1
    for (int s = 0; s < cp; ++s) {
      const int src = (r - s + cp) % cp;
      Exchange x = s + 1 < cp ? post_kv(b, s) : Exchange{};
      ops::fill(mine, T(0), nkv);
      const T* blk = b.kv[s % 2].data();
      for (int a = 0; a < 2; ++a)
        for (int kc = 0; kc < 2; ++kc) {
          const auto pos = pair(r, a, src, kc, sh.c, at);
          if (!pos) continue;
          kernels::attention_backward(b.dout[a], b.q[a], kv_view(blk, 0, kc, sh), kv_view(blk, 1, kc, sh), b.o[a],
                                      b.l[a], b.ob, b.dkb, b.dvb, tiles_, *pos);
          ops::add(b.dq[a].data(), b.ob.data(), index_t(b.ob.span()));
          ops::add(kv_ptr(mine, 0, kc, sh), b.dkb.data(), sh.chunk_kv());
          ops::add(kv_ptr(mine, 1, kc, sh), b.dvb.data(), sh.chunk_kv());
        }
      if (cp > 1) {
        {
          ScopedRegion region("comm/context/ring");
          dkv_shift.wait();
        }
        if (s > 0) ops::add(mine, in, nkv);
        std::swap(mine, sent);
        Kokkos::fence();  // the sum is complete before the transport reads it
        comm::TrafficLedger::sent(comm::Traffic::Cp, double(nkv) * sizeof(T));
        dkv_shift = comm_->isendrecv(flat(sent, nkv), next(), flat(in, nkv), prev(), kTagDkv);
      }
      wait(x);
    }
    const T* done = mine;  // cp = 1: the block never left
    if (cp > 1) {
      // The last shift brought this rank's own block back, complete.
      ScopedRegion region("comm/context/ring");
      dkv_shift.wait();
      done = in;
    }
    for (int a = 0; a < 2; ++a) ops::copy_rows(dq, b.dq[a], a * sh.c, false);
    unpack_kv(done, dk, dv, sh);
  }

 private:
  using C4 = Kokkos::View<T****, Layout, D, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;  // [B,c,H,hd]
  using C3 = Kokkos::View<T***, Layout, D>;                                           // [B,H,c]
  using Buf = Kokkos::View<T*, Layout, D>;
  using Flat = Kokkos::View<T*, Layout, D, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
  static constexpr int kTagKv = 0x4356, kTagDkv = 0x4357;

  static index_t kv_elems(const Shape& s) { return 4 * s.chunk_kv(); }  // a block: k and v, two chunks each
  // Per shape, reused across calls: packed queries, outputs and their
  // gradients per local chunk, the two key/value blocks of the ring
  // (current and in flight), the dk/dv partial sums, one block's results.
  struct Buffers {
    Shape shape;
    Buf q_mem, o_mem, dout_mem, dq_mem, ob_mem, dkb_mem, dvb_mem;
    C4 q[2], o[2], dout[2], dq[2], ob, dkb, dvb;
    C3 l[2], lb;
    Buf kv[2], dkv[3];
  };
  // The ring shift of one step (the next key/value block).
  struct Exchange {
    comm::Request shift;
  };

  Buffers& buffers(const Shape& s) const {
    if (have_ && buf_.shape == s) return buf_;
    Buffers b;
    b.shape = s;
    const index_t cq = s.B * s.c * s.H * s.hd, ckv = s.chunk_kv();
    auto alloc = [](const char* l, index_t n) { return Buf(std::string("exa::context::") + l, n); };
    auto two = [&](Buf& mem, C4* out, index_t heads, const char* l) {
      mem = alloc(l, 2 * s.B * s.c * heads * s.hd);
      for (int a = 0; a < 2; ++a) out[a] = C4(mem.data() + a * s.B * s.c * heads * s.hd, s.B, s.c, heads, s.hd);
    };
    two(b.q_mem, b.q, s.H, "q");
    two(b.o_mem, b.o, s.H, "out");
    two(b.dout_mem, b.dout, s.H, "dout");
    two(b.dq_mem, b.dq, s.H, "dq");
    b.ob_mem = alloc("block_out", cq);
    b.ob = C4(b.ob_mem.data(), s.B, s.c, s.H, s.hd);
    b.dkb_mem = alloc("block_dk", ckv);
    b.dkb = C4(b.dkb_mem.data(), s.B, s.c, s.Hkv, s.hd);
    b.dvb_mem = alloc("block_dv", ckv);
    b.dvb = C4(b.dvb_mem.data(), s.B, s.c, s.Hkv, s.hd);
    for (int a = 0; a < 2; ++a) b.l[a] = C3("exa::context::lse", s.B, s.H, s.c);
    b.lb = C3("exa::context::block_lse", s.B, s.H, s.c);
    for (auto& kv : b.kv) kv = alloc("kv", kv_elems(s));
    for (auto& d : b.dkv) d = alloc("dkv", kv_elems(s));
    buf_ = std::move(b);
    have_ = true;
    return buf_;
  }

  // The local chunk a of x as packed chunk buffers.
  static void pack(const A4& x, C4* dst, index_t c) {
    for (int a = 0; a < 2; ++a) ops::copy_rows(x, dst[a], a * c, true);
  }
  // A key/value block: [k chunk 0, k chunk 1, v chunk 0, v chunk 1], each [B,c,Hkv,hd].
  static T* kv_ptr(T* blk, int which, int kc, const Shape& s) { return blk + (2 * which + kc) * s.chunk_kv(); }
  static C4 kv_view(const T* blk, int which, int kc, const Shape& s) {
    return C4(const_cast<T*>(blk) + (2 * which + kc) * s.chunk_kv(), s.B, s.c, s.Hkv, s.hd);
  }
  static void pack_kv(const A4& k, const A4& v, const Buf& blk, const Shape& s) {
    for (int kc = 0; kc < 2; ++kc) {
      ops::copy_rows(k, kv_view(blk.data(), 0, kc, s), kc * s.c, true);
      ops::copy_rows(v, kv_view(blk.data(), 1, kc, s), kc * s.c, true);
    }
  }
  static void unpack_kv(const T* blk, const A4& dk, const A4& dv, const Shape& s) {
    for (int kc = 0; kc < 2; ++kc) {
      ops::copy_rows(dk, kv_view(blk, 0, kc, s), kc * s.c, false);
      ops::copy_rows(dv, kv_view(blk, 1, kc, s), kc * s.c, false);
    }
  }
  static Flat flat(T* p, index_t n) { return Flat(p, n); }

  int next() const { return (zz_.rank + 1) % zz_.cp; }
  int prev() const { return (zz_.rank - 1 + zz_.cp) % zz_.cp; }

  // Step s's block is kv[s % 2]; send it on and receive the next into the other.
  Exchange post_kv(Buffers& b, int s) const {
    Kokkos::fence();  // the packed block is complete before the transport reads it
    const index_t n = kv_elems(b.shape);
    comm::TrafficLedger::sent(comm::Traffic::Cp, double(n) * sizeof(T));
    return {comm_->isendrecv(flat(b.kv[s % 2].data(), n), next(), flat(b.kv[(s + 1) % 2].data(), n), prev(), kTagKv)};
  }
  static void wait(Exchange& x) {
    ScopedRegion region("comm/context/ring");
    x.shift.wait();
  }

  // Offsets of (this rank's chunk a, rank src's key chunk kc), none when the
  // keys all lie in the queries' future.
  // Documents (packed sequences) are indexed by the whole sequence's
  // positions, which these offsets are.
  std::optional<kernels::AttentionOffsets> pair(int r, int a, int src, int kc, index_t c,
                                                const model::AttentionPositions& at) const {
    const index_t qi = zz_.chunk_of(r, a), ki = zz_.chunk_of(src, kc);
    if (qi < ki) return std::nullopt;
    return kernels::AttentionOffsets{qi * c, ki * c, at.doc_start, at.doc_end, at.doc_stride};
  }

  mutable Buffers buf_;
  mutable bool have_ = false;
  mutable std::int64_t pairs_ = 0;
};

}  // namespace exa::parallel::context
