// Boxes of a tensor (kernels/box_index.hpp): the global index of each box
// element matches a brute-force enumeration; init_normal_box fills a piece
// of a box with exactly the whole tensor's values at those positions, bit for
// bit; checksum_box of the pieces of any partition adds up to the whole
// tensor's checksum.
#include <gtest/gtest.h>

#include <cstdint>
#include <cstring>
#include <vector>

#include "core/error.hpp"
#include "harness/backend.hpp"
#include "kernels/box_index.hpp"
#include "kernels/checksum.hpp"
#include "kernels/init.hpp"

namespace {

using exa::kernels::BoxIndex;
using exa::test::TestDevice;
using Shape = std::vector<std::int64_t>;
using V1 = Kokkos::View<float*, Kokkos::LayoutRight, TestDevice>;

struct TestBox {
  Shape offset, extent;
};

std::int64_t numel(const Shape& s) {
  std::int64_t n = 1;
  for (auto x : s) n *= x;
  return n;
}

// Global flat indices of a box's elements in the box's row-major order, by
// walking its coordinates (independent of BoxIndex's merged arithmetic).
std::vector<std::uint64_t> brute_force(const Shape& shape, const TestBox& b) {
  std::vector<std::uint64_t> out;
  const std::size_t n = shape.size();
  const std::int64_t m = numel(b.extent);
  for (std::int64_t k = 0; k < m; ++k) {
    std::int64_t rem = k;
    Shape c(n);
    for (std::size_t d = n; d-- > 0;) {
      c[d] = b.offset[d] + rem % b.extent[d];
      rem /= b.extent[d];
    }
    std::int64_t g = 0;
    for (std::size_t d = 0; d < n; ++d) g = g * shape[d] + c[d];
    out.push_back(static_cast<std::uint64_t>(g));
  }
  return out;
}

// Every box of `shape` whose extents are from {1, full, a middle part}.
std::vector<TestBox> some_boxes(const Shape& shape) {
  std::vector<TestBox> boxes(1);
  for (std::int64_t s : shape) {
    std::vector<TestBox> next;
    for (const auto& b : boxes) {
      std::vector<std::pair<std::int64_t, std::int64_t>> choices = {{0, s}, {s - 1, 1}};
      if (s >= 3) choices.push_back({1, s - 2});
      for (auto [o, e] : choices) {
        TestBox nb = b;
        nb.offset.push_back(o);
        nb.extent.push_back(e);
        next.push_back(nb);
      }
    }
    boxes = next;
  }
  return boxes;
}

std::vector<float> to_host(const V1& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<float>(h.data(), h.data() + h.extent(0));
}

}  // namespace

TEST(BoxIndex, MatchesTheBoxCoordinatesInEveryShape) {
  const std::vector<Shape> shapes = {{7}, {3, 4}, {2, 3, 4}, {3, 1, 2, 3}, {4, 1}, {2, 5, 1, 3}};
  for (const auto& shape : shapes) {
    for (const auto& b : some_boxes(shape)) {
      const BoxIndex map = exa::kernels::box_index(shape, b.offset, b.extent);
      const auto want = brute_force(shape, b);
      ASSERT_EQ(map.numel, want.size());
      for (std::size_t k = 0; k < want.size(); ++k) {
        ASSERT_EQ(map(k), want[k]) << "shape rank " << shape.size() << " element " << k;
      }
    }
  }
  // A whole tensor is one contiguous run, and so is a split of dimension 0.
  EXPECT_TRUE(exa::kernels::whole_box_index({4, 6, 5}).contiguous());
  EXPECT_TRUE(exa::kernels::box_index({4, 6, 5}, {2, 0, 0}, {2, 6, 5}).contiguous());
  EXPECT_FALSE(exa::kernels::box_index({4, 6, 5}, {0, 3, 0}, {4, 3, 5}).contiguous());
}

TEST(BoxIndex, RejectsBoxesOutsideTheTensor) {
  EXPECT_THROW(exa::kernels::box_index({4, 6}, {2, 0}, {3, 6}), exa::Error);
  EXPECT_THROW(exa::kernels::box_index({4, 6}, {0}, {4}), exa::Error);
  EXPECT_THROW(exa::kernels::box_index({4, 6}, {-1, 0}, {1, 6}), exa::Error);
}

// The column- and row-parallel splits of a [12, 8] weight, and ZeRO ranges
// inside each box: the piece holds the whole tensor's values at its global
// positions, bit for bit.
TEST(BoxIndex, InitOfAPieceIsTheWholeTensorsValues) {
  const Shape shape = {12, 8};
  const auto key = exa::philox_key(42, "layers.0.mlp.w1");
  V1 whole("whole", 96);
  exa::kernels::init_normal(whole, key, 0.02);
  const auto w = to_host(whole);
  for (int dim : {0, 1}) {
    for (std::int64_t parts : {2, 4}) {
      for (std::int64_t k = 0; k < parts; ++k) {
        TestBox b{{0, 0}, shape};
        b.extent[static_cast<std::size_t>(dim)] /= parts;
        b.offset[static_cast<std::size_t>(dim)] = k * b.extent[static_cast<std::size_t>(dim)];
        const auto map = exa::kernels::box_index(shape, b.offset, b.extent);
        const auto g = brute_force(shape, b);
        const std::int64_t n = numel(b.extent);
        // The whole box, then its second third (a ZeRO part).
        for (auto [off, cnt] : {std::pair<std::int64_t, std::int64_t>{0, n}, {n / 3, n / 3 + 1}}) {
          V1 piece("piece", static_cast<std::size_t>(cnt));
          exa::kernels::init_normal_box(piece, key, 0.02, map, off);
          const auto p = to_host(piece);
          for (std::int64_t e = 0; e < cnt; ++e) {
            const float want = w[g[static_cast<std::size_t>(off + e)]];
            ASSERT_EQ(std::memcmp(&p[static_cast<std::size_t>(e)], &want, 4), 0)
                << "dim " << dim << " part " << k << "/" << parts << " element " << off + e;
          }
        }
      }
    }
  }
  V1 too_long("too_long", 25);
  EXPECT_THROW(exa::kernels::init_normal_box(too_long, key, 0.02, exa::kernels::box_index(shape, {0, 0}, {3, 8})),
               exa::Error);
}

TEST(BoxIndex, PiecesChecksumsAddUpToTheWholeTensors) {
  const Shape shape = {4, 6, 5};
  const auto key = exa::philox_key(7, "layers.1.moe.experts.w1");
  V1 whole("whole", 120);
  exa::kernels::init_normal(whole, key, 1.0);
  const std::uint64_t want = exa::kernels::checksum(whole, 0);
  EXPECT_EQ(exa::kernels::checksum_box(whole, exa::kernels::whole_box_index(shape)), want);
  // Experts split in two (dim 0), each half's FFN dimension split in three
  // (dim 1), and each of those boxes in two uneven flat ranges.
  const auto w = to_host(whole);
  std::uint64_t sum = 0;
  for (std::int64_t e = 0; e < 2; ++e) {
    for (std::int64_t f = 0; f < 3; ++f) {
      const TestBox b{{2 * e, 2 * f, 0}, {2, 2, 5}};
      const auto map = exa::kernels::box_index(shape, b.offset, b.extent);
      const auto g = brute_force(shape, b);
      for (auto [lo, hi] : {std::pair<std::int64_t, std::int64_t>{0, 7}, {7, 20}}) {
        auto h = Kokkos::create_mirror_view(V1("piece", static_cast<std::size_t>(hi - lo)));
        for (std::int64_t k = lo; k < hi; ++k) h(static_cast<std::size_t>(k - lo)) = w[g[static_cast<std::size_t>(k)]];
        V1 piece("piece", h.extent(0));
        Kokkos::deep_copy(piece, h);
        sum = exa::kernels::checksum_combine(sum, exa::kernels::checksum_box(piece, map, lo));
      }
    }
  }
  EXPECT_EQ(sum, want);
}
