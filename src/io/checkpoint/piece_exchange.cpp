#include "io/checkpoint/piece_exchange.hpp"

#include <algorithm>
#include <cstring>
#include <functional>

#include "core/error.hpp"
#include "io/checkpoint/piece_copy.hpp"

namespace exa::io {

namespace {

constexpr int kMaxDims = 4;
constexpr int kPieceInts = 3 + 2 * kMaxDims;  // dims, begin, end, offsets, extents

void pack_piece(const Piece& p, std::int64_t* out) {
  const auto n = std::int64_t(p.box.extent.size());
  EXA_REQUIRE(n <= kMaxDims, "exchange_pieces: a tensor of {} dimensions (at most {})", n, kMaxDims);
  out[0] = p.range.size() > 0 ? n : -1;
  out[1] = p.range.begin;
  out[2] = p.range.end;
  for (std::int64_t d = 0; d < n; ++d) {
    out[3 + d] = p.box.offset[std::size_t(d)];
    out[3 + kMaxDims + d] = p.box.extent[std::size_t(d)];
  }
}

Piece unpack_piece(const std::int64_t* in, std::size_t dims) {
  Piece p;
  p.box.offset.assign(dims, 0);
  p.box.extent.assign(dims, 0);
  if (in[0] < 0) return p;  // holds nothing
  p.range = {in[1], in[2]};
  for (std::size_t d = 0; d < dims; ++d) {
    p.box.offset[d] = in[3 + d];
    p.box.extent[d] = in[3 + kMaxDims + d];
  }
  return p;
}

// Row `row` of a piece (dimension 0) as a piece of a tensor without it,
// and where that piece's values start in the whole piece's values. Empty
// range when the piece does not hold the row.
struct RowPiece {
  Piece piece;
  std::int64_t base = 0;  // row-piece value j is whole-piece value base + j
};
RowPiece row_piece(const Piece& p, std::int64_t row) {
  RowPiece r;
  const std::size_t n = p.box.extent.size();
  r.piece.box.offset.assign(p.box.offset.begin() + 1, p.box.offset.end());
  r.piece.box.extent.assign(p.box.extent.begin() + 1, p.box.extent.end());
  if (p.range.size() <= 0 || n < 2) return r;
  const std::int64_t k = row - p.box.offset[0];
  if (k < 0 || k >= p.box.extent[0]) return r;
  std::int64_t S = 1;
  for (std::size_t d = 1; d < n; ++d) S *= p.box.extent[d];
  const std::int64_t b = std::max(p.range.begin, k * S), e = std::min(p.range.end, (k + 1) * S);
  if (b >= e) return r;
  r.piece.range = {b - k * S, e - k * S};
  r.base = b - p.range.begin;
  return r;
}

// Every run one tensor moves from rank `src` (its owned ranges) to rank
// `dst`, in an order both compute alike: fn(s, d, n) with s an index into
// src's values, d into dst's.
void tensor_runs(const ExchangeTensor& t, const Piece& src, const std::vector<FlatRange>& owned, const Piece& dst,
                 const std::function<void(std::int64_t, std::int64_t, std::int64_t)>& fn) {
  if (owned.empty() || dst.range.size() <= 0) return;
  auto each_owned = [&](const Piece& whole_src, std::int64_t src_base, const Piece& to, std::int64_t dst_base,
                        std::int64_t shift) {
    for (const auto& o : owned) {
      // The owned part of src, as a piece of the same box.
      Piece part{whole_src.box, {o.begin - shift, o.end - shift}};
      part.range.begin = std::max(part.range.begin, whole_src.range.begin);
      part.range.end = std::min(part.range.end, whole_src.range.end);
      if (part.range.size() <= 0) continue;
      const std::int64_t skip = part.range.begin - whole_src.range.begin;
      for_each_overlap_run(part, to, [&](std::int64_t s, std::int64_t d, std::int64_t n) {
        fn(src_base + skip + s, dst_base + d, n);
      });
    }
  };
  if (t.rows.empty()) {
    each_owned(src, 0, dst, 0, 0);
    return;
  }
  std::int64_t S = 1;  // elements per row of the old layout's box order
  for (std::size_t d = 1; d < src.box.extent.size(); ++d) S *= src.box.extent[d];
  for (std::size_t i = 0; i < t.rows.size(); ++i) {
    const std::int64_t from_row = t.rows[i];
    if (from_row < 0) continue;
    const RowPiece s = row_piece(src, from_row), d = row_piece(dst, std::int64_t(i));
    if (s.piece.range.size() <= 0 || d.piece.range.size() <= 0) continue;
    // Owned ranges are in src's box order; the row piece's order is that
    // shifted by the row's start.
    const std::int64_t shift = (from_row - src.box.offset[0]) * S;
    each_owned(s.piece, s.base, d.piece, d.base, shift);
  }
}

}  // namespace

ExchangeReport exchange_pieces(const std::vector<ExchangeTensor>& tensors, const std::vector<ExchangePiece>& from,
                               const std::vector<ExchangePiece>& to, MPI_Comm comm) {
  int me = 0, P = 1;
  MPI_Comm_rank(comm, &me);
  MPI_Comm_size(comm, &P);
  const std::size_t T = tensors.size();
  EXA_REQUIRE(from.size() == T && to.size() == T, "exchange_pieces: {} tensors but {} and {} pieces", T, from.size(),
              to.size());
  std::size_t buffers = 0;
  for (std::size_t t = 0; t < T; ++t)
    for (const auto* p : {&from[t], &to[t]})
      if (p->piece.range.size() > 0) buffers = std::max(buffers, p->values.size());
  {
    long long b = static_cast<long long>(buffers), hi = 0;
    MPI_Allreduce(&b, &hi, 1, MPI_LONG_LONG, MPI_MAX, comm);
    buffers = std::size_t(hi);
  }
  for (std::size_t t = 0; t < T; ++t)
    for (const auto* p : {&from[t], &to[t]})
      EXA_REQUIRE(p->piece.range.size() <= 0 || p->values.size() == buffers,
                  "exchange_pieces: {} has {} buffers, the others {}", tensors[t].name, p->values.size(), buffers);

  // Every rank's pieces, old and new.
  std::vector<std::int64_t> mine(T * 2 * kPieceInts, 0), all(std::size_t(P) * mine.size());
  for (std::size_t t = 0; t < T; ++t) {
    pack_piece(from[t].piece, &mine[(2 * t) * kPieceInts]);
    pack_piece(to[t].piece, &mine[(2 * t + 1) * kPieceInts]);
  }
  MPI_Allgather(mine.data(), int(mine.size()), MPI_INT64_T, all.data(), int(mine.size()), MPI_INT64_T, comm);
  auto piece_of = [&](int r, std::size_t t, bool is_to) {
    const auto& shape = is_to ? tensors[t].to_shape : tensors[t].from_shape;
    return unpack_piece(&all[std::size_t(r) * mine.size() + (2 * t + (is_to ? 1 : 0)) * kPieceInts], shape.size());
  };

  std::vector<std::vector<Piece>> olds(T, std::vector<Piece>(std::size_t(P)));
  std::vector<PieceCover> covers;
  covers.reserve(T);
  for (std::size_t t = 0; t < T; ++t) {
    for (int r = 0; r < P; ++r) olds[t][std::size_t(r)] = piece_of(r, t, false);
    covers.emplace_back(tensors[t].from_shape, olds[t], "/model/" + tensors[t].name);
  }
  // What this rank sends (its owned elements to every rank's new piece) and
  // receives (every rank's owned elements into its new piece), in the
  // order both sides compute alike: fn(t, peer, s, d, n).
  using Run = std::function<void(std::size_t, int, std::int64_t, std::int64_t, std::int64_t)>;
  auto for_sends = [&](const Run& fn) {
    for (std::size_t t = 0; t < T; ++t) {
      const auto owned = covers[t].owned(me);
      if (owned.empty()) continue;
      for (int q = 0; q < P; ++q)
        tensor_runs(tensors[t], from[t].piece, owned, piece_of(q, t, true),
                    [&](std::int64_t s, std::int64_t d, std::int64_t n) { fn(t, q, s, d, n); });
    }
  };
  auto for_recvs = [&](const Run& fn) {
    for (std::size_t t = 0; t < T; ++t) {
      if (to[t].piece.range.size() <= 0) continue;
      for (int r = 0; r < P; ++r)
        tensor_runs(tensors[t], olds[t][std::size_t(r)], covers[t].owned(r), to[t].piece,
                    [&](std::int64_t s, std::int64_t d, std::int64_t n) { fn(t, r, s, d, n); });
    }
  };
  const auto B = std::int64_t(buffers);
  std::vector<std::int64_t> send_n(std::size_t(P), 0), recv_n(std::size_t(P), 0);
  std::vector<std::vector<char>> filled(T);
  for (std::size_t t = 0; t < T; ++t)
    filled[t].assign(std::size_t(std::max<std::int64_t>(0, to[t].piece.range.size())), 0);
  for_sends([&](std::size_t, int q, std::int64_t, std::int64_t, std::int64_t n) { send_n[std::size_t(q)] += n * B; });
  for_recvs([&](std::size_t t, int r, std::int64_t, std::int64_t d, std::int64_t n) {
    recv_n[std::size_t(r)] += n * B;
    std::fill(filled[t].begin() + d, filled[t].begin() + d + n, char(1));
  });
  const std::size_t np = std::size_t(P);
  std::vector<int> sc(np, 0), rc(np, 0), sdisp(np, 0), rdisp(np, 0);
  for (int r = 0; r < P; ++r) {
    EXA_REQUIRE(send_n[std::size_t(r)] < (std::int64_t(1) << 31) && recv_n[std::size_t(r)] < (std::int64_t(1) << 31),
                "exchange_pieces: more than 2^31 values between two ranks (not built: a chunked exchange)");
    sc[std::size_t(r)] = int(send_n[std::size_t(r)]);
    rc[std::size_t(r)] = int(recv_n[std::size_t(r)]);
    if (r > 0) {
      sdisp[std::size_t(r)] = sdisp[std::size_t(r - 1)] + sc[std::size_t(r - 1)];
      rdisp[std::size_t(r)] = rdisp[std::size_t(r - 1)] + rc[std::size_t(r - 1)];
    }
  }
  std::vector<float> sendbuf(std::size_t(sdisp.back() + sc.back())), recvbuf(std::size_t(rdisp.back() + rc.back()));
  std::vector<int> pos(sdisp);
  for_sends([&](std::size_t t, int q, std::int64_t s, std::int64_t, std::int64_t n) {
    for (std::size_t b = 0; b < buffers; ++b) {
      std::memcpy(&sendbuf[std::size_t(pos[std::size_t(q)])], from[t].values[b] + s, std::size_t(n) * sizeof(float));
      pos[std::size_t(q)] += int(n);
    }
  });
  MPI_Alltoallv(sendbuf.data(), sc.data(), sdisp.data(), MPI_FLOAT, recvbuf.data(), rc.data(), rdisp.data(),
                MPI_FLOAT, comm);
  pos = rdisp;
  for_recvs([&](std::size_t t, int r, std::int64_t, std::int64_t d, std::int64_t n) {
    for (std::size_t b = 0; b < buffers; ++b) {
      std::memcpy(to[t].values[b] + d, &recvbuf[std::size_t(pos[std::size_t(r)])], std::size_t(n) * sizeof(float));
      pos[std::size_t(r)] += int(n);
    }
  });
  ExchangeReport rep;
  for (int r = 0; r < P; ++r)
    if (r != me) {
      rep.sent += send_n[std::size_t(r)] / std::max<std::int64_t>(1, B);
      rep.received += recv_n[std::size_t(r)] / std::max<std::int64_t>(1, B);
    }
  // Every to-element must have come from somewhere, except rows left as they are.
  long long missing = 0;
  std::string first;
  for (std::size_t t = 0; t < T; ++t) {
    const auto& ten = tensors[t];
    const auto& p = to[t].piece;
    if (p.range.size() <= 0) continue;
    std::int64_t S = 1;
    for (std::size_t d = 1; d < p.box.extent.size(); ++d) S *= p.box.extent[d];
    for (std::int64_t k = 0; k < p.range.size(); ++k) {
      if (filled[t][std::size_t(k)]) continue;
      const std::int64_t row = p.box.offset[0] + (p.range.begin + k) / std::max<std::int64_t>(1, S);
      if (!ten.rows.empty() && ten.rows[std::size_t(row)] < 0) continue;
      if (missing++ == 0) first = ten.name;
    }
  }
  long long total = 0;
  MPI_Allreduce(&missing, &total, 1, MPI_LONG_LONG, MPI_SUM, comm);
  EXA_REQUIRE(total == 0, "exchange_pieces: {} elements of the new layout have no source (first on this rank: {}); "
              "a row map names an old row no rank holds", total, first.empty() ? "none" : first);
  return rep;
}

}  // namespace exa::io
