// In-memory exchange of a model's state between two layouts
// (io/checkpoint/piece_exchange.hpp), run by ctest at 1, 2 and 4 ranks: an
// expert-like tensor grows along dimension 0 (rows copied from old rows,
// one row left as the new piece holds it) while moving from a split by rows
// to ZeRO ranges of the whole; a 1-d tensor goes from ZeRO ranges to a
// replica on every rank. Two buffers move together. A row map naming a row
// no rank holds is refused on every rank.
#include <gtest/gtest.h>

#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/checkpoint/piece_exchange.hpp"
#include "mpi_checkpoint_util.hpp"

using namespace exa;
using exa::test::contains;
using exa::test::error_of;
using exa::test::world_rank;
using exa::test::world_size;

namespace {

float value_at(int tensor, std::int64_t g, int buffer) { return 1000.f * buffer + 100.f * tensor + 0.5f * g; }

struct Held {
  io::Piece piece;
  std::vector<std::vector<float>> values;  // per buffer
  io::ExchangePiece view() {
    io::ExchangePiece p{piece, {}};
    for (auto& v : values) p.values.push_back(v.data());
    return p;
  }
};

Held hold(io::Piece p, float fill) {
  Held h{std::move(p), {}};
  h.values.assign(2, std::vector<float>(std::size_t(std::max<std::int64_t>(0, h.piece.range.size())), fill));
  return h;
}

// Global index of box element k (row-major in the box) of a tensor with
// trailing extents `inner` (elements per row of the global tensor `row`).
std::int64_t global_of(const io::Piece& p, std::int64_t k, const std::vector<std::int64_t>& shape) {
  std::int64_t g = 0, rest = k;
  std::vector<std::int64_t> idx(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    idx[d] = p.box.offset[d] + rest % p.box.extent[d];
    rest /= p.box.extent[d];
  }
  for (std::size_t d = 0; d < shape.size(); ++d) g = g * shape[d] + idx[d];
  return g;
}

}  // namespace

TEST(PieceExchange, GrowsRowsAndReCutsRanges) {
  const int r = world_rank(), n = world_size();
  const std::vector<std::int64_t> old0{4, 3, 2}, new0{6, 3, 2}, shape1{12};
  const std::vector<std::int64_t> rows{0, 1, 2, 3, 1, -1};
  std::vector<io::ExchangeTensor> tensors{{"experts", old0, new0, rows}, {"norm", shape1, shape1, {}}};
  // Old: rows of tensor 0 split over the ranks; ZeRO ranges of tensor 1.
  const std::int64_t lo = 4 * r / n, hi = 4 * (r + 1) / n;
  Held a0 = hold({model::Box{{lo, 0, 0}, {hi - lo, 3, 2}}, {0, (hi - lo) * 6}}, 0.f);
  Held a1 = hold({model::Box{{0}, {12}}, {12 * r / n, 12 * (r + 1) / n}}, 0.f);
  for (int b = 0; b < 2; ++b) {
    for (std::int64_t k = 0; k < a0.piece.range.size(); ++k)
      a0.values[std::size_t(b)][std::size_t(k)] = value_at(0, global_of(a0.piece, k, old0), b);
    for (std::int64_t k = 0; k < a1.piece.range.size(); ++k)
      a1.values[std::size_t(b)][std::size_t(k)] = value_at(1, a1.piece.range.begin + k, b);
  }
  // New: ZeRO ranges of the grown tensor 0 (36 elements); tensor 1 whole.
  Held b0 = hold({model::Box{{0, 0, 0}, {6, 3, 2}}, {36 * r / n, 36 * (r + 1) / n}}, -7.f);
  Held b1 = hold({model::Box{{0}, {12}}, {0, 12}}, -7.f);
  const auto rep = io::exchange_pieces(tensors, {a0.view(), a1.view()}, {b0.view(), b1.view()}, MPI_COMM_WORLD);
  for (int b = 0; b < 2; ++b) {
    for (std::int64_t k = 0; k < b0.piece.range.size(); ++k) {
      const std::int64_t g = b0.piece.range.begin + k, row = g / 6, from = rows[std::size_t(row)];
      const float want = from < 0 ? -7.f : value_at(0, from * 6 + g % 6, b);
      ASSERT_EQ(b0.values[std::size_t(b)][std::size_t(k)], want) << "buffer " << b << " element " << g;
    }
    for (std::int64_t k = 0; k < 12; ++k) ASSERT_EQ(b1.values[std::size_t(b)][std::size_t(k)], value_at(1, k, b));
  }
  if (n == 1) {
    EXPECT_EQ(rep.sent, 0);
    EXPECT_EQ(rep.received, 0);
  } else {
    EXPECT_GT(rep.received, 0);
  }
}

TEST(PieceExchange, RowNoRankHoldsIsRefusedEverywhere) {
  const int r = world_rank(), n = world_size();
  const std::vector<std::int64_t> old0{4, 2}, new0{5, 2};
  std::vector<io::ExchangeTensor> tensors{{"router", old0, new0, {0, 1, 2, 3, 7}}};
  Held a = hold({model::Box{{0, 0}, {4, 2}}, {8 * r / n, 8 * (r + 1) / n}}, 1.f);
  Held b = hold({model::Box{{0, 0}, {5, 2}}, {10 * r / n, 10 * (r + 1) / n}}, 0.f);
  const std::string e = error_of([&] { io::exchange_pieces(tensors, {a.view()}, {b.view()}, MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(e, "no source")) << e;
  EXPECT_TRUE(contains(e, "2 elements")) << e;
}
