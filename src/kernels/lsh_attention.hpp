#pragma once
// Causal LSH attention (Reformer, Kitaev et al. 2020) with grouped-query
// heads, on the same tensors as kernels/attention.hpp:
//
//   q [B,T,H,hd]   k, v [B,T,Hkv,hd]   out [B,T,H,hd]   lse [B,H,T]
//
// Queries and keys keep their own projections; the hashes are computed on the
// (RoPE-rotated) keys, and query row i travels with key row i. Per kv head
// and hash round r:
//   1. angular LSH: bucket(k_j) = argmax([k_j R, -k_j R]) with a Gaussian
//      rotation R drawn from Philox keyed by (layer, global kv head, round),
//      so every layout draws the same R. Past 32 buckets the bucket is a
//      pair of two such hashes (b1 * f2 + b2), which keeps the hashing cost
//      at hd * sqrt(buckets) per key instead of hd * buckets;
//   2. a stable counting sort of the positions by bucket;
//   3. the sorted order is cut into chunks of `bucket` positions; position i
//      in chunk c of round r sees the positions of chunks [c - chunks_before,
//      c] of round r.
// With `local`, one more round keeps every key in one bucket: position order,
// so each position also sees its neighbours' chunks (local attention).
// Row i attends to the union over the rounds of what it sees there, masked
// causally by original position (j <= i) and by documents when sequences are
// packed: one softmax over that union, each key counted once (a pair seen in
// an earlier round is skipped, the de-duplication of the Reformer paper made
// exact). Every row sees itself, so no row is empty. When one chunk holds the
// whole sequence (bucket >= T) every row sees every earlier key: this is
// exactly causal attention.
//
// Buckets per round: 2 * ceil(T / bucket), so a bucket holds about half a
// chunk. Cost per row: hashes * (chunks_before + 1) * bucket keys instead of
// T, plus the hashing (linear in T) and the sort (linear in T).
//
// Backward recomputes the hashes and sorts (cheap next to the attention, and
// the seam keeps no state) and runs the kernels/attention.hpp equations in
// three passes with one writer per output element: D_i = dout_i . out_i, dq
// per query row, dk/dv per key row (the queries that see key j in round r are
// those of chunks [c_j, c_j + chunks_before], the same pair predicate
// transposed), summing over the group's query heads and the rounds in a
// fixed order. No atomics: bitwise reproducible.
#include <cmath>
#include <cstdint>

#include "core/error.hpp"
#include "core/kokkos_shims.hpp"
#include "core/philox.hpp"
#include "core/types.hpp"
#include "kernels/attention.hpp"

namespace exa::kernels {

struct LshConfig {
  int hashes = 2;         // hash rounds
  int bucket = 64;        // sorted positions per attention chunk
  int chunks_before = 1;  // earlier chunks each chunk also sees
  std::int64_t layer = 0;          // keys the rotations
  std::int64_t kv_head_begin = 0;  // global index of this rank's kv head 0 (tensor parallelism)
  // One more round in position order (every key in one bucket): each
  // position also sees its neighbours, the chunks of plain local attention.
  bool local = false;
  int rounds() const { return hashes + (local ? 1 : 0); }
};

// The bucket factors of a round for sequence length T: f1 * f2 buckets, f2 =
// 1 when one hash suffices.
struct LshBuckets {
  int f1 = 2, f2 = 1;
  int count() const { return f1 * f2; }
  int columns() const { return f1 / 2 + (f2 > 1 ? f2 / 2 : 0); }
};

inline LshBuckets lsh_buckets(int T, int bucket) {
  const int n = 2 * ((T + bucket - 1) / bucket);
  if (n <= 32) return {n < 2 ? 2 : n, 1};
  const int f = 2 * static_cast<int>(std::ceil(std::sqrt(static_cast<double>(n)) / 2.0));
  return {f, f};
}

namespace lsh_detail {

template <class D>
struct Sorted {
  // perm(b, g, r, s): the position at sorted slot s; rank(b, g, r, p): the
  // sorted slot of position p.
  Kokkos::View<std::int32_t****, Kokkos::LayoutRight, D> perm, rank;
};

// Whether round r' < r already paired query i with key j.
template <class R>
KOKKOS_INLINE_FUNCTION bool seen_before(const R& rank, int b, int g, int r, int i, int j, int C, int before) {
  for (int rr = 0; rr < r; ++rr) {
    const int ci = rank(b, g, rr, i) / C, cj = rank(b, g, rr, j) / C;
    if (cj <= ci && cj >= ci - before) return true;
  }
  return false;
}

template <class K>
Sorted<typename K::device_type> hash_and_sort(const K& k, const LshConfig& cfg, const exec_of<K>& exec) {
  using Dev = typename K::device_type;
  using T = typename K::non_const_value_type;
  const int B = int(k.extent(0)), Tn = int(k.extent(1)), G = int(k.extent(2)), hd = int(k.extent(3));
  const int R = cfg.rounds();
  const bool local = cfg.local;
  const LshBuckets nb = lsh_buckets(Tn, cfg.bucket);
  const int cols = nb.columns(), f1 = nb.f1, f2 = nb.f2, n = nb.count();
  Kokkos::View<T****, Kokkos::LayoutRight, Dev> rot(
      Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, "exa::attention::lsh_rotations"), G, R, hd, cols);
  const PhiloxKey key = philox_key(static_cast<std::uint64_t>(cfg.layer), "exa::lsh_attention::rotation");
  const std::int64_t g0 = cfg.kv_head_begin;
  Kokkos::parallel_for(
      "exa::attention::lsh_draw", Kokkos::RangePolicy<exec_of<K>>(exec, 0, std::int64_t(G) * R * hd * cols),
      KOKKOS_LAMBDA(const std::int64_t e) {
        const int c = int(e % cols), d = int((e / cols) % hd), r = int((e / (cols * hd)) % R);
        const int g = int(e / (std::int64_t(cols) * hd * R));
        // Indexed by the global head and the column's place in the factor,
        // not by T's bucket count, beyond which nothing is read.
        const std::uint64_t idx = ((std::uint64_t(g0 + g) * 64u + std::uint64_t(r)) * 4096u + std::uint64_t(d)) *
                                      8192u + std::uint64_t(c);
        rot(g, r, d, c) = T(philox_normal(key, idx));
      });
  Sorted<Dev> s{Kokkos::View<std::int32_t****, Kokkos::LayoutRight, Dev>(
                    Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, "exa::attention::lsh_perm"), B, G, R, Tn),
                Kokkos::View<std::int32_t****, Kokkos::LayoutRight, Dev>(
                    Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, "exa::attention::lsh_rank"), B, G, R, Tn)};
  const auto perm = s.perm, rank = s.rank;
  // rank first holds each position's bucket.
  Kokkos::parallel_for(
      "exa::attention::lsh_hash", Kokkos::RangePolicy<exec_of<K>>(exec, 0, std::int64_t(B) * G * R * Tn),
      KOKKOS_LAMBDA(const std::int64_t e) {
        const int p = int(e % Tn), r = int((e / Tn) % R), g = int((e / (std::int64_t(Tn) * R)) % G);
        const int b = int(e / (std::int64_t(Tn) * R * G));
        if (local && r == R - 1) {  // the local round: one bucket, so position order
          rank(b, g, r, p) = 0;
          return;
        }
        const T* x = &k(b, p, g, 0);
        int best[2] = {0, 0};
        const int sizes[2] = {f1, f2};
        int col = 0;
        for (int f = 0; f < (f2 > 1 ? 2 : 1); ++f) {
          T top = T(0);
          for (int c = 0; c < sizes[f] / 2; ++c, ++col) {
            T dot = T(0);
            for (int d = 0; d < hd; ++d) dot += x[d] * rot(g, r, d, col);
            if (c == 0 || dot > top) top = dot, best[f] = c;
            if (-dot > top) top = -dot, best[f] = c + sizes[f] / 2;
          }
        }
        rank(b, g, r, p) = best[0] * f2 + best[1];
      });
  Kokkos::View<std::int32_t**, Kokkos::LayoutRight, Dev> start(
      Kokkos::view_alloc(exec, "exa::attention::lsh_bucket_starts"), std::int64_t(B) * G * R, n);
  Kokkos::parallel_for(
      "exa::attention::lsh_sort", Kokkos::RangePolicy<exec_of<K>>(exec, 0, std::int64_t(B) * G * R),
      KOKKOS_LAMBDA(const std::int64_t e) {
        const int r = int(e % R), g = int((e / R) % G), b = int(e / (std::int64_t(R) * G));
        for (int p = 0; p < Tn; ++p) ++start(e, rank(b, g, r, p));
        int sum = 0;
        for (int c = 0; c < n; ++c) {
          const int cnt = start(e, c);
          start(e, c) = sum;
          sum += cnt;
        }
        for (int p = 0; p < Tn; ++p) {  // in position order: stable
          const int slot = start(e, rank(b, g, r, p))++;
          perm(b, g, r, slot) = p;
          rank(b, g, r, p) = slot;
        }
      });
  return s;
}

struct Geometry {
  int B, T, H, G, hd, rep, C, before, R;
  index_t offset;
  const std::int32_t* doc_start;
  const std::int32_t* doc_end;
  index_t doc_stride;
};

template <class Q, class K, class V>
Geometry check(const Q& q, const K& k, const V& v, const LshConfig& cfg, const AttentionOffsets& pos) {
  const auto s = attention_detail::check_shapes(q, k, v);
  EXA_REQUIRE(s.Tk == s.T && pos.q_offset == pos.k_offset,
              "exa::kernels::lsh_attention: queries and keys must be the same rows of whole sequences (got T = {}, "
              "Tk = {}, offsets {} and {}); LSH attention does not take key blocks of other positions",
              s.T, s.Tk, pos.q_offset, pos.k_offset);
  EXA_REQUIRE(cfg.hashes >= 1 && cfg.bucket >= 1 && cfg.chunks_before >= 0,
              "exa::kernels::lsh_attention: hashes ({}) and bucket ({}) must be >= 1, chunks_before ({}) >= 0",
              cfg.hashes, cfg.bucket, cfg.chunks_before);
  return {s.B, s.T, s.H, s.Hkv, s.hd, s.rep, cfg.bucket, cfg.chunks_before, cfg.rounds(), pos.q_offset,
          pos.doc_start, pos.doc_end, pos.doc_stride};
}

// The first key row query row i may see (its document's start).
KOKKOS_INLINE_FUNCTION int first_key(const Geometry& g, int b, int i) {
  return g.doc_start ? int(g.doc_start[b * g.doc_stride + i + g.offset] - g.offset) : 0;
}
// One past the last query row that may see key row j (its document's end).
KOKKOS_INLINE_FUNCTION int query_end(const Geometry& g, int b, int j) {
  return g.doc_end ? int(g.doc_end[b * g.doc_stride + j + g.offset] - g.offset) : g.T;
}

// The (sequence, head, position) of flat index e over [B, H, T].
struct Row {
  int b, h, i;
};
KOKKOS_INLINE_FUNCTION Row row_of(const Geometry& g, std::int64_t e) {
  return {int(e / (std::int64_t(g.T) * g.H)), int((e / g.T) % g.H), int(e % g.T)};
}

// f(j) for every key row j that query row i sees, each once: in every round
// the sorted slots of its chunk and the chunks_before before it, causal,
// in its document, and not already paired in an earlier round. The forward
// and the dq pass visit the same pairs through it.
template <class P, class R, class F>
KOKKOS_INLINE_FUNCTION void for_each_key(const P& perm, const R& rank, const Geometry& g, int b, int kv, int i,
                                         F&& f) {
  const int lo = first_key(g, b, i);
  for (int r = 0; r < g.R; ++r) {
    const int c = rank(b, kv, r, i) / g.C;
    const int s0 = (c - g.before > 0 ? c - g.before : 0) * g.C;
    const int s1 = (c + 1) * g.C < g.T ? (c + 1) * g.C : g.T;
    for (int s = s0; s < s1; ++s) {
      const int j = perm(b, kv, r, s);
      if (j > i || j < lo || seen_before(rank, b, kv, r, i, j, g.C, g.before)) continue;
      f(j);
    }
  }
}

}  // namespace lsh_detail

// out and lse are overwritten; lse[b,h,i] is the log-sum-exp of row i's
// scores over the keys it sees.
template <class Q, class K, class V, class O, class L>
void lsh_attention_forward(const Q& q, const K& k, const V& v, const O& out, const L& lse, const LshConfig& cfg,
                           AttentionOffsets pos = {}, const exec_of<O>& exec = exec_of<O>{}) {
  namespace ld = lsh_detail;
  using T = typename O::non_const_value_type;
  const ld::Geometry g = ld::check(q, k, v, cfg, pos);
  EXA_REQUIRE(attention_detail::same_shape4(out, q) && attention_detail::lse_shape_ok(q, lse),
              "exa::kernels::lsh_attention_forward: out must be shaped like q and lse [B,H,T]");
  const auto sorted = ld::hash_and_sort(k, cfg, exec);
  const auto perm = sorted.perm, rank = sorted.rank;
  const T scale = T(1) / std::sqrt(T(g.hd));
  Kokkos::parallel_for(
      "exa::attention::lsh_forward", Kokkos::RangePolicy<exec_of<O>>(exec, 0, std::int64_t(g.B) * g.H * g.T),
      KOKKOS_LAMBDA(const std::int64_t e) {
        const ld::Row row = ld::row_of(g, e);
        const int b = row.b, h = row.h, i = row.i;
        const int kv = h / g.rep;
        T* o = &out(b, i, h, 0);
        const T* qi = &q(b, i, h, 0);
        for (int d = 0; d < g.hd; ++d) o[d] = T(0);
        T m = -kx::infinity<T>(), l = T(0);
        ld::for_each_key(perm, rank, g, b, kv, i, [&](const int j) {
          const T sc = scale * attention_detail::dot<T>(qi, &k(b, j, kv, 0), g.hd);
          if (sc > m) {
            const T alpha = kx::exp(m - sc);  // 0 on the first key
            l *= alpha;
            for (int d = 0; d < g.hd; ++d) o[d] *= alpha;
            m = sc;
          }
          const T p = kx::exp(sc - m);
          l += p;
          const T* vj = &v(b, j, kv, 0);
          for (int d = 0; d < g.hd; ++d) o[d] += p * vj[d];
        });
        for (int d = 0; d < g.hd; ++d) o[d] /= l;
        lse(b, h, i) = m + kx::log(l);
      });
}

// Gradients of sum(out * dout) with respect to q, k and v; dq, dk, dv are
// overwritten. out and lse are the forward's.
template <class DO, class Q, class K, class V, class O, class L, class DQ, class DK, class DV>
void lsh_attention_backward(const DO& dout, const Q& q, const K& k, const V& v, const O& out, const L& lse,
                            const DQ& dq, const DK& dk, const DV& dv, const LshConfig& cfg, AttentionOffsets pos = {},
                            const exec_of<DQ>& exec = exec_of<DQ>{}) {
  namespace ld = lsh_detail;
  using T = typename DQ::non_const_value_type;
  using Dev = typename DQ::device_type;
  const ld::Geometry g = ld::check(q, k, v, cfg, pos);
  EXA_REQUIRE(attention_detail::same_shape4(dout, q) && attention_detail::same_shape4(out, q) &&
                  attention_detail::same_shape4(dq, q) && attention_detail::same_shape4(dk, k) &&
                  attention_detail::same_shape4(dv, k) && attention_detail::lse_shape_ok(q, lse),
              "exa::kernels::lsh_attention_backward: dout, out, dq must be shaped like q, dk and dv like k, lse [B,H,T]");
  const auto sorted = ld::hash_and_sort(k, cfg, exec);
  const auto perm = sorted.perm, rank = sorted.rank;
  const T scale = T(1) / std::sqrt(T(g.hd));
  Kokkos::View<T***, Kokkos::LayoutRight, Dev> Dv(
      Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, "exa::attention::lsh_D"), g.B, g.H, g.T);
  Kokkos::parallel_for(
      "exa::attention::lsh_D", Kokkos::RangePolicy<exec_of<DQ>>(exec, 0, std::int64_t(g.B) * g.H * g.T),
      KOKKOS_LAMBDA(const std::int64_t e) {
        const ld::Row row = ld::row_of(g, e);
        const int b = row.b, h = row.h, i = row.i;
        Dv(b, h, i) = attention_detail::dot<T>(&dout(b, i, h, 0), &out(b, i, h, 0), g.hd);
      });
  Kokkos::parallel_for(
      "exa::attention::lsh_dq", Kokkos::RangePolicy<exec_of<DQ>>(exec, 0, std::int64_t(g.B) * g.H * g.T),
      KOKKOS_LAMBDA(const std::int64_t e) {
        const ld::Row row = ld::row_of(g, e);
        const int b = row.b, h = row.h, i = row.i;
        const int kv = h / g.rep;
        T* dqi = &dq(b, i, h, 0);
        const T* qi = &q(b, i, h, 0);
        const T* doi = &dout(b, i, h, 0);
        const T li = lse(b, h, i), Di = Dv(b, h, i);
        for (int d = 0; d < g.hd; ++d) dqi[d] = T(0);
        ld::for_each_key(perm, rank, g, b, kv, i, [&](const int j) {
          const T* kj = &k(b, j, kv, 0);
          const T p = kx::exp(scale * attention_detail::dot<T>(qi, kj, g.hd) - li);
          const T ds = p * (attention_detail::dot<T>(doi, &v(b, j, kv, 0), g.hd) - Di);
          for (int d = 0; d < g.hd; ++d) dqi[d] += scale * ds * kj[d];
        });
      });
  Kokkos::parallel_for(
      "exa::attention::lsh_dkdv", Kokkos::RangePolicy<exec_of<DQ>>(exec, 0, std::int64_t(g.B) * g.G * g.T),
      KOKKOS_LAMBDA(const std::int64_t e) {
        const int j = int(e % g.T), kv = int((e / g.T) % g.G), b = int(e / (std::int64_t(g.T) * g.G));
        const int hi = ld::query_end(g, b, j);
        T* dkj = &dk(b, j, kv, 0);
        T* dvj = &dv(b, j, kv, 0);
        const T* kj = &k(b, j, kv, 0);
        const T* vj = &v(b, j, kv, 0);
        for (int d = 0; d < g.hd; ++d) dkj[d] = dvj[d] = T(0);
        for (int h = kv * g.rep; h < (kv + 1) * g.rep; ++h) {
          for (int r = 0; r < g.R; ++r) {
            const int c = rank(b, kv, r, j) / g.C;
            const int s0 = c * g.C;
            const int s1 = (c + g.before + 1) * g.C < g.T ? (c + g.before + 1) * g.C : g.T;
            for (int s = s0; s < s1; ++s) {
              const int i = perm(b, kv, r, s);
              if (i < j || i >= hi || ld::seen_before(rank, b, kv, r, i, j, g.C, g.before)) continue;
              const T* qi = &q(b, i, h, 0);
              const T* doi = &dout(b, i, h, 0);
              const T p = kx::exp(scale * attention_detail::dot<T>(qi, kj, g.hd) - lse(b, h, i));
              const T ds = p * (attention_detail::dot<T>(doi, vj, g.hd) - Dv(b, h, i));
              for (int d = 0; d < g.hd; ++d) {
                dvj[d] += p * doi[d];
                dkj[d] += scale * ds * qi[d];
              }
            }
          }
        }
      });
}

}  // namespace exa::kernels
