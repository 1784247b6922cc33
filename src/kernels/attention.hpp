#pragma once
// Causal multi-head attention with grouped-query heads (GQA), tiled with an
// online softmax (FlashAttention-2 style).
//
//   q   [B,T,H,hd]     k, v [B,Tk,Hkv,hd]     out [B,T,H,hd]     lse [B,H,T]
//
// H % Hkv == 0; query head h reads kv head h / (H/Hkv). Scale 1/sqrt(hd).
// Causal with explicit positions (AttentionOffsets): query row i sits at
// position q_offset + i, key row j at k_offset + j, and i attends to j when
// q_offset + i >= k_offset + j. So each query row sees a prefix of the key
// block (visible_keys); with offsets (0, 0) and Tk = T that is j <= i.
// Packed sequences narrow that further: with documents (AttentionOffsets),
// a query row sees only the keys of its own document, a range of the key
// block (Visibility below). Context parallelism (ring attention) calls the kernels with key blocks of
// other positions. A row that sees no key at all gets out = 0 and
// lse = -inf (the neutral element of a log-sum-exp merge), and zero dq.
// Key tiles that no row of a query tile sees are never loaded, and query
// tiles that see none of a key tile are skipped in the dk/dv pass.
//
// Forward: one team per (b, h, query tile). Key/value tiles are staged in
// team scratch; each thread owns whole query rows and keeps a running max
// and running sum, rescaling its output row as new key tiles arrive. No T x T
// matrix exists anywhere: only a [block_q, block_k] score tile per team. The
// log-sum-exp of every row is saved for the backward pass.
//
// Backward recomputes the probabilities tile by tile from lse:
//   D_i   = dout_i . out_i
//   p_ij  = exp(scale q_i.k_j - lse_i)
//   dv_j += p_ij dout_i
//   ds_ij = p_ij (dout_i . v_j - D_i)
//   dq_i += scale ds_ij k_j
//   dk_j += scale ds_ij q_i
// in passes arranged so that every output element has exactly one writer
// (no atomics, bit-reproducible): D for every row, then a dq pass (team per (b, h, query tile), key
// tiles in scratch) and a dk/dv pass (team per (b, kv head, key tile), query
// and dout tiles in scratch, summing over the query heads of the group in a
// fixed order).
//
// lse and out are only read, so the backward also takes values that another
// computation produced: ring attention merges the forwards over all key
// blocks and calls the backward of each block with the merged lse and out;
// then p_ij and D_i are the global ones, the dq of the blocks sum to the full
// dq and each block's dk, dv are the full gradients of its keys.
//
// Those team kernels are the device (e.g. CUDA) path. Views whose execution
// space is a host space take the gemm-based path of attention_host.hpp
// instead (same results up to rounding, same lse); the choice is made at
// compile time in attention_forward/attention_backward. The team kernels stay
// reachable as attention_detail::forward_team/backward_team (tests compare
// both paths on host).
//
// All tensors must be LayoutRight (the head dimension is contiguous).
// Accumulation is in the output's scalar type.
#include <cmath>
#include <cstdint>
#include <type_traits>

#include "core/error.hpp"
#include "core/kokkos_shims.hpp"
#include "core/types.hpp"

namespace exa::kernels {

// Tile sizes (query rows per team, key rows per scratch tile). The defaults
// suit CPUs and GPUs; tests shrink them to exercise many partial tiles.
struct AttentionTiles {
  int block_q = 32;
  int block_k = 32;
  // Host path (gemm-based): query rows per tile (bounds the score scratch to
  // host_block_q x T per head).
  int host_block_q = 64;
};

// Positions of the first query row and the first key row (see above), and
// the documents of packed sequences: with doc_start set, query position p
// sees only the keys at or after doc_start[b * doc_stride + p], the first
// position of its document, and key position p is seen only by the queries
// before doc_end[b * doc_stride + p], one past its document's last
// position. Both arrays cover every position either side reaches (the
// whole sequence under context parallelism), are non-decreasing along the
// sequence and live where the views do. Null: one document, the causal
// mask alone.
struct AttentionOffsets {
  index_t q_offset = 0;
  index_t k_offset = 0;
  const std::int32_t* doc_start = nullptr;
  const std::int32_t* doc_end = nullptr;
  index_t doc_stride = 0;
};

namespace attention_detail {

template <class Exec, class T>
using Scratch2 = Kokkos::View<T**, Kokkos::LayoutRight, typename Exec::scratch_memory_space,
                              Kokkos::MemoryTraits<Kokkos::Unmanaged>>;
template <class Exec, class T>
using Scratch1 = Kokkos::View<T*, Kokkos::LayoutRight, typename Exec::scratch_memory_space,
                              Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

// Host backends: let Kokkos choose (1 thread per team on Serial/OpenMP).
// Device backends: one thread per tile row.
template <class Exec>
Kokkos::TeamPolicy<Exec> team_policy(const Exec& exec, int league, int rows) {
  if constexpr (Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename Exec::memory_space>::accessible) {
    (void)rows;
    return Kokkos::TeamPolicy<Exec>(exec, league, Kokkos::AUTO);
  } else {
    return Kokkos::TeamPolicy<Exec>(exec, league, rows < 256 ? rows : 256);
  }
}

// Team scratch level that can hold `bytes` (level 1 is global-memory scratch).
template <class Exec>
int scratch_level(std::size_t bytes) {
  return bytes <= static_cast<std::size_t>(Kokkos::TeamPolicy<Exec>::scratch_size_max(0)) ? 0 : 1;
}

// a . b over n contiguous elements with 8 independent partial sums, so the
// compiler can vectorise it without reassociating (fixed order, bitwise
// reproducible).
template <class T, class A, class B>
KOKKOS_FORCEINLINE_FUNCTION T dot(const A* a, const B* b, int n) {
  T acc[8] = {T(0), T(0), T(0), T(0), T(0), T(0), T(0), T(0)};
  int c = 0;
  for (; c + 8 <= n; c += 8)
    for (int u = 0; u < 8; ++u) acc[u] += T(a[c + u]) * T(b[c + u]);
  for (int u = 0; c < n; ++c, ++u) acc[u] += T(a[c]) * T(b[c]);
  return ((acc[0] + acc[4]) + (acc[1] + acc[5])) + ((acc[2] + acc[6]) + (acc[3] + acc[7]));
}

template <class A, class B>
bool same_shape4(const A& a, const B& b) {
  return a.extent(0) == b.extent(0) && a.extent(1) == b.extent(1) && a.extent(2) == b.extent(2) &&
         a.extent(3) == b.extent(3);
}

template <class Q, class L>
bool lse_shape_ok(const Q& q, const L& lse) {
  return lse.extent(0) == q.extent(0) && lse.extent(1) == q.extent(2) && lse.extent(2) == q.extent(1);
}

template <class V>
void require_layout_right() {
  static_assert(std::is_same<typename V::array_layout, Kokkos::LayoutRight>::value,
                "exa::kernels::attention needs LayoutRight views");
}

struct Shape {
  int B, T, Tk, H, Hkv, hd, rep;
};

template <class Q, class K, class V>
Shape check_shapes(const Q& q, const K& k, const V& v) {
  Shape s;
  s.B = static_cast<int>(q.extent(0));
  s.T = static_cast<int>(q.extent(1));
  s.H = static_cast<int>(q.extent(2));
  s.hd = static_cast<int>(q.extent(3));
  s.Tk = static_cast<int>(k.extent(1));
  s.Hkv = static_cast<int>(k.extent(2));
  EXA_REQUIRE(s.Hkv > 0 && s.H % s.Hkv == 0,
              "exa::kernels::attention: n_heads ({}) must be a multiple of n_kv_heads ({})", s.H, s.Hkv);
  EXA_REQUIRE(k.extent(0) == q.extent(0) && k.extent(3) == q.extent(3) && same_shape4(v, k),
              "exa::kernels::attention: q must be [B,T,H,hd] and k, v [B,Tk,Hkv,hd] with the same B and hd "
              "(got q [{},{},{},{}], k [{},{},{},{}], v [{},{},{},{}])",
              q.extent(0), q.extent(1), q.extent(2), q.extent(3), k.extent(0), k.extent(1), k.extent(2),
              k.extent(3), v.extent(0), v.extent(1), v.extent(2), v.extent(3));
  s.rep = s.H / s.Hkv;
  return s;
}

// Query row i sees the keys [0, visible_keys) of the key block, where
// shift = q_offset - k_offset: key j is visible when i + shift >= j.
KOKKOS_INLINE_FUNCTION int visible_keys(int i, index_t shift, int Tk) {
  const index_t n = static_cast<index_t>(i) + shift + 1;
  return n <= 0 ? 0 : (n >= Tk ? Tk : static_cast<int>(n));
}

// The first query row (of T) that sees key j; T when none does. Every later
// row sees it too.
KOKKOS_INLINE_FUNCTION int first_query(int j, index_t shift, int T) {
  const index_t i = static_cast<index_t>(j) - shift;
  return i <= 0 ? 0 : (i >= T ? T : static_cast<int>(i));
}

// The keys a query row sees and the queries that see a key, as ranges of
// the block's rows: row i of batch b sees keys [key_lo, key_hi), key j is
// seen by rows [query_lo, query_hi). Without documents key_lo is 0 and
// query_hi is T. Every bound is non-decreasing in i (or j), so a tile's
// first row has the smallest key_lo and its last row the largest key_hi.
struct Visibility {
  index_t q_offset = 0, k_offset = 0, shift = 0;
  int T = 0, Tk = 0;
  const std::int32_t* start = nullptr;
  const std::int32_t* end = nullptr;
  index_t stride = 0;

  Visibility(const AttentionOffsets& p, int T_, int Tk_)
      : q_offset(p.q_offset), k_offset(p.k_offset), shift(p.q_offset - p.k_offset), T(T_), Tk(Tk_),
        start(p.doc_start), end(p.doc_end), stride(p.doc_stride) {}

  KOKKOS_INLINE_FUNCTION static int clamp(index_t x, int n) { return x <= 0 ? 0 : (x >= n ? n : int(x)); }
  KOKKOS_INLINE_FUNCTION int key_hi(int i) const { return visible_keys(i, shift, Tk); }
  KOKKOS_INLINE_FUNCTION int key_lo(int b, int i) const {
    return start == nullptr ? 0 : clamp(index_t(start[b * stride + q_offset + i]) - k_offset, Tk);
  }
  KOKKOS_INLINE_FUNCTION int query_lo(int j) const { return first_query(j, shift, T); }
  KOKKOS_INLINE_FUNCTION int query_hi(int b, int j) const {
    return end == nullptr ? T : clamp(index_t(end[b * stride + k_offset + j]) - q_offset, T);
  }
};

// The (batch, query head, query tile) that a team of the forward and dq
// kernels owns: league index = (b * H + h) * n_tiles + tile; g is the kv head.
struct QueryTile {
  int b, h, g, i0, i1, nrows;
  KOKKOS_INLINE_FUNCTION QueryTile(int league, int n_tiles, int H, int rep, int bq, int T)
      : b(league / (n_tiles * H)),
        h((league / n_tiles) % H),
        g(h / rep),
        i0((league % n_tiles) * bq),
        i1(kx::min(i0 + bq, T)),
        nrows(i1 - i0) {}
};

inline void check_tiles(const AttentionTiles& t) {
  EXA_REQUIRE(t.block_q > 0 && t.block_k > 0 && t.host_block_q > 0,
              "exa::kernels::attention: tile sizes must be positive (got {}x{}, host {})", t.block_q, t.block_k,
              t.host_block_q);
}

}  // namespace attention_detail

}  // namespace exa::kernels

#include "kernels/attention_host.hpp"

namespace exa::kernels {

namespace attention_detail {

// Team-kernel (device) forward; also runs on host backends (tests compare it
// with the host path).
template <class Q, class K, class V, class O, class L>
void forward_team(const Q& q, const K& k, const V& v, const O& out, const L& lse, AttentionTiles tiles,
                  AttentionOffsets pos = {}, const exec_of<O>& exec = exec_of<O>{}) {
  namespace ad = attention_detail;
  using Exec = exec_of<O>;
  using T = scalar_of<O>;
  using S2 = ad::Scratch2<Exec, T>;
  using S1 = ad::Scratch1<Exec, T>;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  ad::require_layout_right<Q>();
  ad::require_layout_right<K>();
  ad::require_layout_right<V>();
  ad::require_layout_right<O>();
  const ad::Shape sh = ad::check_shapes(q, k, v);
  ad::check_tiles(tiles);
  EXA_REQUIRE(ad::same_shape4(out, q) && ad::lse_shape_ok(q, lse),
              "exa::kernels::attention_forward: out must be shaped like q and lse [B,H,T]");
  const int Tn = sh.T, Tk = sh.Tk, H = sh.H, hd = sh.hd, rep = sh.rep;
  if (sh.B == 0 || Tn == 0 || H == 0) return;
  const int bq = tiles.block_q, bk = tiles.block_k;
  const int nqt = (Tn + bq - 1) / bq;
  const ad::Visibility vis(pos, Tn, Tk);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));

  const std::size_t bytes = 2 * S2::shmem_size(bk, hd) + S2::shmem_size(bq, bk) + 2 * S1::shmem_size(bq);
  const int lvl = ad::scratch_level<Exec>(bytes);
  auto policy = ad::team_policy<Exec>(exec, sh.B * H * nqt, bq);
  policy.set_scratch_size(lvl, Kokkos::PerTeam(bytes));

  Kokkos::parallel_for(
      "exa::attention::forward", policy, KOKKOS_LAMBDA(const Member& team) {
        const ad::QueryTile tile(team.league_rank(), nqt, H, rep, bq, Tn);
        const int b = tile.b, h = tile.h, g = tile.g, i0 = tile.i0, i1 = tile.i1, nrows = tile.nrows;
        S2 Ks(team.team_scratch(lvl), bk, hd);
        S2 Vs(team.team_scratch(lvl), bk, hd);
        S2 Sc(team.team_scratch(lvl), bq, bk);
        S1 mrow(team.team_scratch(lvl), bq);
        S1 lrow(team.team_scratch(lvl), bq);
        // The first row sees the earliest keys and the last row the latest;
        // key tiles outside that range are fully masked. A row's running
        // state starts empty (max -inf, sum 0, out 0): the first tile it
        // sees rescales it by exp(-inf) = 0, so the start costs no bits.
        const int klo = vis.key_lo(b, i0), nvis = vis.key_hi(i1 - 1);
        const int nkt = (nvis + bk - 1) / bk;
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nrows), [&](const int r) {
          mrow(r) = -kx::infinity<T>();
          lrow(r) = T(0);
          T* oi = &out(b, i0 + r, h, 0);
          for (int c = 0; c < hd; ++c) oi[c] = T(0);
        });
        for (int kt = klo / bk; kt < nkt && klo < nvis; ++kt) {
          const int j0 = kt * bk;
          const int jn = kx::min(bk, nvis - j0);
          team.team_barrier();  // everyone is done with the previous tile
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, jn * hd), [&](const int t) {
            const int jj = t / hd, c = t % hd;
            Ks(jj, c) = k(b, j0 + jj, g, c);
            Vs(jj, c) = v(b, j0 + jj, g, c);
          });
          team.team_barrier();
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nrows), [&](const int r) {
            const int i = i0 + r;
            // Row i's keys in this tile: [ja, je) of its rows.
            const int ja = kx::max(0, vis.key_lo(b, i) - j0), je = kx::min(jn, vis.key_hi(i) - j0);
            if (je <= ja) return;  // every key of this tile is masked for row i
            const auto* qi = &q(b, i, h, 0);
            T* oi = &out(b, i, h, 0);
            T tile_max = kx::lowest<T>();
            for (int jj = ja; jj < je; ++jj) {
              const T* kj = &Ks(jj, 0);
              const T s = scale * ad::dot<T>(qi, kj, hd);
              Sc(r, jj) = s;
              tile_max = kx::max(tile_max, s);
            }
            const T m_old = mrow(r);
            const T m_new = kx::max(m_old, tile_max);
            const T alpha = kx::exp(m_old - m_new);
            T psum = 0;
            for (int jj = ja; jj < je; ++jj) {
              const T p = kx::exp(Sc(r, jj) - m_new);
              Sc(r, jj) = p;
              psum += p;
            }
            lrow(r) = lrow(r) * alpha + psum;
            for (int c = 0; c < hd; ++c) oi[c] *= alpha;
            mrow(r) = m_new;
            for (int jj = ja; jj < je; ++jj) {
              const T p = Sc(r, jj);
              const T* vj = &Vs(jj, 0);
              for (int c = 0; c < hd; ++c) oi[c] += p * vj[c];
            }
          });
        }
        team.team_barrier();
        Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nrows), [&](const int r) {
          const int i = i0 + r;
          T* oi = &out(b, i, h, 0);
          if (vis.key_hi(i) <= vis.key_lo(b, i)) {  // no key: out stays 0
            lse(b, h, i) = -kx::infinity<T>();
            return;
          }
          const T inv = T(1) / lrow(r);
          for (int c = 0; c < hd; ++c) oi[c] *= inv;
          lse(b, h, i) = mrow(r) + kx::log(lrow(r));
        });
      });
}

// Team-kernel (device) backward.
template <class DO, class Q, class K, class V, class O, class L, class DQ, class DK, class DV>
void backward_team(const DO& dout, const Q& q, const K& k, const V& v, const O& out, const L& lse, const DQ& dq,
                   const DK& dk, const DV& dv, AttentionTiles tiles, AttentionOffsets pos = {},
                   const exec_of<DQ>& exec = exec_of<DQ>{}) {
  namespace ad = attention_detail;
  using Exec = exec_of<DQ>;
  using T = scalar_of<DQ>;
  using S2 = ad::Scratch2<Exec, T>;
  using S1 = ad::Scratch1<Exec, T>;
  using Member = typename Kokkos::TeamPolicy<Exec>::member_type;
  ad::require_layout_right<DO>();
  ad::require_layout_right<Q>();
  ad::require_layout_right<K>();
  ad::require_layout_right<V>();
  ad::require_layout_right<O>();
  ad::require_layout_right<DQ>();
  ad::require_layout_right<DK>();
  ad::require_layout_right<DV>();
  const ad::Shape sh = ad::check_shapes(q, k, v);
  ad::check_tiles(tiles);
  EXA_REQUIRE(ad::same_shape4(dout, q) && ad::same_shape4(out, q) && ad::same_shape4(dq, q) &&
                  ad::same_shape4(dk, k) && ad::same_shape4(dv, k) && ad::lse_shape_ok(q, lse),
              "exa::kernels::attention_backward: dout, out, dq must be shaped like q, dk and dv like k, lse [B,H,T]");
  const int B = sh.B, Tn = sh.T, Tk = sh.Tk, H = sh.H, Hkv = sh.Hkv, hd = sh.hd, rep = sh.rep;
  // T == 0 still runs: dk and dv are then zero.
  if (B == 0 || H == 0) return;
  const int bq = tiles.block_q, bk = tiles.block_k;
  const int nqt = (Tn + bq - 1) / bq;
  const int nkt = (Tk + bk - 1) / bk;
  const ad::Visibility vis(pos, Tn, Tk);
  const T scale = static_cast<T>(1.0 / std::sqrt(static_cast<double>(hd)));

  // D_i = dout_i . out_i, laid out like lse.
  Kokkos::View<T***, Kokkos::LayoutRight, typename DQ::device_type> delta(
      Kokkos::view_alloc(exec, Kokkos::WithoutInitializing, "exa::attention::delta"), B, H, Tn);
  Kokkos::parallel_for(
      "exa::attention::backward_delta", Kokkos::RangePolicy<Exec>(exec, 0, static_cast<index_t>(B) * H * Tn),
      KOKKOS_LAMBDA(const index_t idx) {
        const int i = static_cast<int>(idx % Tn);
        const int h = static_cast<int>((idx / Tn) % H);
        const int b = static_cast<int>(idx / (static_cast<index_t>(Tn) * H));
        const auto* di = &dout(b, i, h, 0);
        const auto* oi = &out(b, i, h, 0);
        delta(b, h, i) = ad::dot<T>(di, oi, hd);
      });

  // dq: team per (b, h, query tile), key/value tiles in scratch.
  {
    const std::size_t bytes = 2 * S2::shmem_size(bk, hd);
    const int lvl = ad::scratch_level<Exec>(bytes);
    auto policy = ad::team_policy<Exec>(exec, B * H * nqt, bq);
    policy.set_scratch_size(lvl, Kokkos::PerTeam(bytes));
    Kokkos::parallel_for(
        "exa::attention::backward_dq", policy, KOKKOS_LAMBDA(const Member& team) {
          const ad::QueryTile tile(team.league_rank(), nqt, H, rep, bq, Tn);
          const int b = tile.b, h = tile.h, g = tile.g, i0 = tile.i0, i1 = tile.i1, nrows = tile.nrows;
          S2 Ks(team.team_scratch(lvl), bk, hd);
          S2 Vs(team.team_scratch(lvl), bk, hd);
          const int klo = vis.key_lo(b, i0), nvis = vis.key_hi(i1 - 1);
          const int nk = (nvis + bk - 1) / bk;
          // dq starts at zero; rows that see no key keep it.
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nrows), [&](const int r) {
            T* dqi = &dq(b, i0 + r, h, 0);
            for (int c = 0; c < hd; ++c) dqi[c] = T(0);
          });
          for (int kt = klo / bk; kt < nk && klo < nvis; ++kt) {
            const int j0 = kt * bk;
            const int jn = kx::min(bk, nvis - j0);
            team.team_barrier();
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, jn * hd), [&](const int t) {
              const int jj = t / hd, c = t % hd;
              Ks(jj, c) = k(b, j0 + jj, g, c);
              Vs(jj, c) = v(b, j0 + jj, g, c);
            });
            team.team_barrier();
            Kokkos::parallel_for(Kokkos::TeamThreadRange(team, nrows), [&](const int r) {
              const int i = i0 + r;
              const int ja = kx::max(0, vis.key_lo(b, i) - j0), je = kx::min(jn, vis.key_hi(i) - j0);
              if (je <= ja) return;
              const auto* qi = &q(b, i, h, 0);
              const auto* doi = &dout(b, i, h, 0);
              T* dqi = &dq(b, i, h, 0);
              const T lse_i = lse(b, h, i);
              const T d_i = delta(b, h, i);
              for (int jj = ja; jj < je; ++jj) {
                const T* kj = &Ks(jj, 0);
                const T* vj = &Vs(jj, 0);
                const T s = ad::dot<T>(qi, kj, hd);
                const T dp = ad::dot<T>(doi, vj, hd);
                const T p = kx::exp(s * scale - lse_i);
                const T ds = scale * p * (dp - d_i);
                for (int c = 0; c < hd; ++c) dqi[c] += ds * kj[c];
              }
            });
          }
        });
  }

  // dk, dv: team per (b, kv head, key tile), query/dout tiles in scratch.
  {
    const std::size_t bytes = 2 * S2::shmem_size(bq, hd) + 2 * S1::shmem_size(bq);
    const int lvl = ad::scratch_level<Exec>(bytes);
    auto policy = ad::team_policy<Exec>(exec, B * Hkv * nkt, bk);
    policy.set_scratch_size(lvl, Kokkos::PerTeam(bytes));
    Kokkos::parallel_for(
        "exa::attention::backward_dkdv", policy, KOKKOS_LAMBDA(const Member& team) {
          const int lid = team.league_rank();
          const int kt = lid % nkt;
          const int g = (lid / nkt) % Hkv;
          const int b = lid / (nkt * Hkv);
          const int j0 = kt * bk;
          const int ncols = kx::min(bk, Tk - j0);
          // Query rows before query_lo(j0) or from query_hi(last key) on see
          // none of this tile's keys: their tiles are skipped.
          const int i_first = vis.query_lo(j0);
          const int i_end = ncols > 0 ? vis.query_hi(b, j0 + ncols - 1) : 0;
          const int qt_first = i_first < i_end ? i_first / bq : nqt;
          const int qt_end = i_first < i_end ? (i_end + bq - 1) / bq : nqt;
          S2 Qs(team.team_scratch(lvl), bq, hd);
          S2 DOs(team.team_scratch(lvl), bq, hd);
          S1 lse_s(team.team_scratch(lvl), bq);
          S1 del_s(team.team_scratch(lvl), bq);
          Kokkos::parallel_for(Kokkos::TeamThreadRange(team, ncols), [&](const int jj) {
            T* dkj = &dk(b, j0 + jj, g, 0);
            T* dvj = &dv(b, j0 + jj, g, 0);
            for (int c = 0; c < hd; ++c) {
              dkj[c] = T(0);
              dvj[c] = T(0);
            }
          });
          for (int hr = 0; hr < rep; ++hr) {
            const int h = g * rep + hr;
            for (int qt = qt_first; qt < qt_end; ++qt) {
              const int i0 = qt * bq;
              const int in = kx::min(bq, Tn - i0);
              team.team_barrier();
              Kokkos::parallel_for(Kokkos::TeamThreadRange(team, in * hd), [&](const int t) {
                const int ii = t / hd, c = t % hd;
                Qs(ii, c) = q(b, i0 + ii, h, c);
                DOs(ii, c) = dout(b, i0 + ii, h, c);
              });
              Kokkos::parallel_for(Kokkos::TeamThreadRange(team, in), [&](const int ii) {
                lse_s(ii) = lse(b, h, i0 + ii);
                del_s(ii) = delta(b, h, i0 + ii);
              });
              team.team_barrier();
              Kokkos::parallel_for(Kokkos::TeamThreadRange(team, ncols), [&](const int jj) {
                const int j = j0 + jj;
                const auto* kj = &k(b, j, g, 0);
                const auto* vj = &v(b, j, g, 0);
                T* dkj = &dk(b, j, g, 0);
                T* dvj = &dv(b, j, g, 0);
                const int iend = kx::min(in, vis.query_hi(b, j) - i0);
                for (int ii = kx::max(0, vis.query_lo(j) - i0); ii < iend; ++ii) {
                  const T* qi = &Qs(ii, 0);
                  const T* doi = &DOs(ii, 0);
                  const T s = ad::dot<T>(qi, kj, hd);
                  const T dp = ad::dot<T>(doi, vj, hd);
                  const T p = kx::exp(s * scale - lse_s(ii));
                  const T ds = scale * p * (dp - del_s(ii));
                  for (int c = 0; c < hd; ++c) {
                    dvj[c] += p * doi[c];
                    dkj[c] += ds * qi[c];
                  }
                }
              });
            }
          }
        });
  }
}

// The calls that predate the offsets, (..., tiles, exec): queries and keys
// start at the same position.
template <class Q, class K, class V, class O, class L>
void forward_team(const Q& q, const K& k, const V& v, const O& out, const L& lse, AttentionTiles tiles,
                  const exec_of<O>& exec) {
  forward_team(q, k, v, out, lse, tiles, AttentionOffsets{}, exec);
}
template <class DO, class Q, class K, class V, class O, class L, class DQ, class DK, class DV>
void backward_team(const DO& dout, const Q& q, const K& k, const V& v, const O& out, const L& lse, const DQ& dq,
                   const DK& dk, const DV& dv, AttentionTiles tiles, const exec_of<DQ>& exec) {
  backward_team(dout, q, k, v, out, lse, dq, dk, dv, tiles, AttentionOffsets{}, exec);
}

// Host execution spaces take the gemm path (attention_host.hpp); device
// spaces the team kernels above.
template <class View>
constexpr bool use_host_path() {
  using Exec = typename View::execution_space;
  return Kokkos::SpaceAccessibility<Exec, Kokkos::HostSpace>::accessible &&
         Kokkos::SpaceAccessibility<Kokkos::HostSpace, typename View::memory_space>::accessible;
}

}  // namespace attention_detail

// out = softmax(scale q k^T + causal mask) v, per head; lse[b,h,i] saved.
// `pos` places the query and key rows (see the top of this file). Runs on
// `exec`, an instance of out's execution space.
template <class Q, class K, class V, class O, class L>
void attention_forward(const Q& q, const K& k, const V& v, const O& out, const L& lse,
                       AttentionTiles tiles = {}, AttentionOffsets pos = {}, const exec_of<O>& exec = exec_of<O>{}) {
  namespace ad = attention_detail;
  ad::require_layout_right<Q>();
  ad::require_layout_right<K>();
  ad::require_layout_right<V>();
  ad::require_layout_right<O>();
  ad::check_tiles(tiles);
  if constexpr (ad::use_host_path<O>())
    ad::forward_host(q, k, v, out, lse, tiles, pos, exec);
  else
    ad::forward_team(q, k, v, out, lse, tiles, pos, exec);
}

// Gradients of sum(out * dout) with respect to q, k and v. dq, dk, dv are
// overwritten. `out` and `lse` are the forward's results, or the merged ones
// of a ring over several key blocks (see the top of this file). Runs on
// `exec`, an instance of dq's execution space.
template <class DO, class Q, class K, class V, class O, class L, class DQ, class DK, class DV>
void attention_backward(const DO& dout, const Q& q, const K& k, const V& v, const O& out, const L& lse,
                        const DQ& dq, const DK& dk, const DV& dv, AttentionTiles tiles = {},
                        AttentionOffsets pos = {}, const exec_of<DQ>& exec = exec_of<DQ>{}) {
  namespace ad = attention_detail;
  ad::require_layout_right<DO>();
  ad::require_layout_right<Q>();
  ad::require_layout_right<K>();
  ad::require_layout_right<V>();
  ad::require_layout_right<O>();
  ad::require_layout_right<DQ>();
  ad::require_layout_right<DK>();
  ad::require_layout_right<DV>();
  ad::check_tiles(tiles);
  if constexpr (ad::use_host_path<DQ>())
    ad::backward_host(dout, q, k, v, out, lse, dq, dk, dv, tiles, pos, exec);
  else
    ad::backward_team(dout, q, k, v, out, lse, dq, dk, dv, tiles, pos, exec);
}

// The calls that predate the offsets, (..., tiles, exec): queries and keys
// start at the same position.
template <class Q, class K, class V, class O, class L>
void attention_forward(const Q& q, const K& k, const V& v, const O& out, const L& lse, AttentionTiles tiles,
                       const exec_of<O>& exec) {
  attention_forward(q, k, v, out, lse, tiles, AttentionOffsets{}, exec);
}
template <class DO, class Q, class K, class V, class O, class L, class DQ, class DK, class DV>
void attention_backward(const DO& dout, const Q& q, const K& k, const V& v, const O& out, const L& lse,
                        const DQ& dq, const DK& dk, const DV& dv, AttentionTiles tiles, const exec_of<DQ>& exec) {
  attention_backward(dout, q, k, v, out, lse, dq, dk, dv, tiles, AttentionOffsets{}, exec);
}

}  // namespace exa::kernels
