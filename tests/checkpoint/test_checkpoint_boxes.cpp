// Checkpoints of partitioned tensors (boxes, and ZeRO ranges inside them),
// run by ctest at 1, 2 and 4 ranks.
//
// A layout (tp, zero) gives rank r the tensor-parallel part r % tp of every
// tensor with a tp_dim (model::partition_box), whole tensors otherwise, and
// the ZeRO part (r / tp) % zero of the flattened boxes (parallel::data::ShardLayout
// over the boxes); the remaining factor of the world holds replicas. A
// checkpoint written by such a layout reads back bit for bit in other
// layouts, whole on each rank alone, and into any single piece. Every test
// is collective (EXPECT_*, never an early return, around the checkpoint
// calls).
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <functional>
#include <string>
#include <vector>

#include "comm/mpi_env.hpp"
#include "core/error.hpp"
#include "io/checkpoint/checkpoint.hpp"
#include "io/checkpoint/piece_cover.hpp"
#include "kernels/checksum.hpp"
#include "model/parameter_store.hpp"
#include "model/shard.hpp"
#include "parallel/data/shard_layout.hpp"
#include "mpi_checkpoint_util.hpp"

namespace fs = std::filesystem;
using namespace exa;
using exa::test::contains;
using exa::test::error_of;
using exa::test::world_rank;
using exa::test::world_size;

namespace {

std::string scratch_dir() { return (fs::path(test::scratch_dir("examoe-ckpt-boxes-test")) / "ckpt").string(); }

// Tiny, with every extent a tensor-parallel split touches divisible by 4:
// layer 0 dense (mlp.w1 [12, 8], attn.wo [8, 8]), layer 1 MoE with 4
// experts of F = 4 and a shared expert, GQA, untied.
model::ModelConfig config() {
  model::ModelConfig c;
  c.vocab_size = 16;
  c.d_model = 8;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.d_ff = 12;
  c.n_experts = 4;
  c.top_k = 2;
  c.d_expert = 4;
  c.moe_every = 2;
  c.n_shared_experts = 1;
  return c;
}

struct Split {
  int tp = 1, zero = 1;
};

// The tensor-parallel boxes of part k of tp.
std::vector<model::Box> tp_boxes(const std::vector<model::ParamSpec>& specs, int tp, int k) {
  std::vector<model::Box> b;
  for (const auto& s : specs) {
    b.push_back(s.tp_dim >= 0 ? model::partition_box(s, s.tp_dim, tp, k) : model::whole_box(s.shape));
  }
  return b;
}

// Part (k, j) of layout l: tensor-parallel part k, ZeRO part j.
std::vector<model::Shard> piece_shards(const model::ModelConfig& c, const Split& l, int k, int j) {
  const auto specs = model::parameter_specs(c);
  return parallel::data::ShardLayout(specs, tp_boxes(specs, l.tp, k), c.n_layers, l.zero, j).shards();
}

// This rank's piece of layout l (tp * zero divides the world).
std::vector<model::Shard> rank_shards(const model::ModelConfig& c, const Split& l) {
  const int r = world_rank();
  return piece_shards(c, l, r % l.tp, (r / l.tp) % l.zero);
}

model::ParameterStore make_store(const model::ModelConfig& c, const std::vector<model::Shard>& shards) {
  model::ParameterStore p(model::parameter_specs(c), shards);
  p.initialize(1234);
  return p;
}

// Moments that differ per tensor, element (by global index) and kind.
float moment_value(const std::string& name, std::uint64_t g, int salt) {
  const std::uint64_t h = kernels::checksum_leaf(name, g * 4 + static_cast<std::uint64_t>(salt));
  return static_cast<float>(static_cast<double>(h >> 40) / double(1 << 24) - 0.5);
}

struct Moments {
  io::OptimizerState state;
};

Moments make_moments(const model::ParameterStore& p, bool fill = true) {
  Moments m;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const auto& sh = p.shard(i);
    io::OptimizerMoments om{View1<float>("exp_avg", sh.count), View1<float>("exp_avg_sq", sh.count)};
    if (fill) {
      const auto map = model::box_index(sh, p.spec(i).shape);
      auto a = Kokkos::create_mirror_view(om.exp_avg);
      auto b = Kokkos::create_mirror_view(om.exp_avg_sq);
      for (std::int64_t k = 0; k < sh.count; ++k) {
        const std::uint64_t g = map(static_cast<std::uint64_t>(sh.offset + k));
        a(k) = moment_value(p.spec(i).name, g, 1);
        b(k) = std::abs(moment_value(p.spec(i).name, g, 2));
      }
      Kokkos::deep_copy(om.exp_avg, a);
      Kokkos::deep_copy(om.exp_avg_sq, b);
    }
    m.state[p.spec(i).name] = om;
  }
  return m;
}

std::vector<float> host(const View1<float>& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<float>(h.data(), h.data() + h.extent(0));
}

// Every element of `got`'s pieces equals, bit for bit, the whole tensor's
// element at its global index (`whole` holds whole tensors).
void expect_piece_of(const model::ParameterStore& whole, const Moments* whole_m, const model::ParameterStore& got,
                     const Moments* got_m, const std::string& what) {
  ASSERT_EQ(whole.size(), got.size());
  for (std::size_t i = 0; i < got.size(); ++i) {
    const auto& name = got.spec(i).name;
    const auto& sh = got.shard(i);
    const auto map = model::box_index(sh, got.spec(i).shape);
    std::vector<std::pair<std::vector<float>, std::vector<float>>> pairs = {
        {host(whole.value(i)), host(got.value(i))}};
    if (whole_m && got_m) {
      pairs.push_back({host(whole_m->state.at(name).exp_avg), host(got_m->state.at(name).exp_avg)});
      pairs.push_back({host(whole_m->state.at(name).exp_avg_sq), host(got_m->state.at(name).exp_avg_sq)});
    }
    for (std::size_t q = 0; q < pairs.size(); ++q) {
      const auto& [w, g] = pairs[q];
      ASSERT_EQ(static_cast<std::int64_t>(g.size()), sh.count) << name;
      std::int64_t bad = 0;
      for (std::int64_t k = 0; k < sh.count; ++k) {
        const auto gi = static_cast<std::size_t>(map(static_cast<std::uint64_t>(sh.offset + k)));
        if (std::memcmp(&w[gi], &g[static_cast<std::size_t>(k)], 4) != 0) ++bad;
      }
      EXPECT_EQ(bad, 0) << what << ": " << (q == 0 ? "" : q == 1 ? "exp_avg " : "exp_avg_sq ") << name << " ("
                        << model::box_str(sh.box) << ", [" << sh.offset << ", " << sh.offset + sh.count << "))";
    }
  }
}

io::CheckpointMeta meta_of(std::uint64_t step, const Split& l) {
  io::CheckpointMeta m;
  m.step = step;
  m.layout.world_size = world_size();
  m.layout.tp = l.tp;
  m.layout.dp = world_size() / l.tp;
  m.layout.zero = l.zero > 1 ? 1 : 0;
  return m;
}

// The layouts of this world: tp = world size (one box per rank), tp = 2
// with ZeRO over the other factor (ZeRO inside boxes), and at 4 ranks tp = 2
// without ZeRO (each box on two replicas, written once). At 1 rank: whole.
// (ZeRO over whole tensors alone is test_checkpoint's.)
std::vector<Split> splits() {
  const int P = world_size();
  std::vector<Split> out = {Split{P, 1}};
  if (P == 4) out.insert(out.end(), {Split{2, 2}, Split{2, 1}});
  if (P == 2) out.push_back(Split{1, 2});
  return out;
}

std::string name_of(const Split& l) { return "tp " + std::to_string(l.tp) + " zero " + std::to_string(l.zero); }

}  // namespace

// The ranks' pieces decide who writes what: equal boxes share by lowest rank,
// disjoint boxes are independent, and gaps are listed per box and outside.
TEST(PieceCover, OwnershipAndGapsOfBoxes) {
  const std::vector<std::int64_t> shape = {4, 6};
  const model::Box top{{0, 0}, {2, 6}}, bottom{{2, 0}, {2, 6}}, left{{0, 0}, {4, 3}};
  // Ranks 0 and 2 hold the top half (rank 2 overlapping rank 0), rank 1 half of the bottom, rank 3 nothing.
  const io::PieceCover c(shape, {{top, {0, 8}}, {bottom, {0, 6}}, {top, {4, 12}}, {left, {0, 0}}}, "t");
  EXPECT_EQ(c.owned(0), (std::vector<io::FlatRange>{{0, 8}}));
  EXPECT_EQ(c.owned(1), (std::vector<io::FlatRange>{{0, 6}}));
  EXPECT_EQ(c.owned(2), (std::vector<io::FlatRange>{{8, 12}}));
  EXPECT_TRUE(c.owned(3).empty());
  ASSERT_EQ(c.gaps().size(), 1u);  // the bottom box's second half
  EXPECT_EQ(c.gaps()[0].box, bottom);
  EXPECT_EQ(c.gaps()[0].ranges, (std::vector<io::FlatRange>{{6, 12}}));
  // Only the left half held: the right half is one block outside every box.
  const io::PieceCover l(shape, {{left, {0, 12}}}, "t");
  ASSERT_EQ(l.gaps().size(), 1u);
  EXPECT_EQ(l.gaps()[0].box, (model::Box{{0, 3}, {4, 3}}));
  EXPECT_EQ(l.gaps()[0].ranges, (std::vector<io::FlatRange>{{0, 12}}));
  // Outside a 2x2 corner box: disjoint blocks covering exactly the other 20 elements.
  const auto out = io::uncovered_boxes(shape, {model::Box{{1, 2}, {2, 2}}});
  std::vector<int> seen(24, 0);
  for (const auto& b : out)
    for (std::int64_t y = b.offset[0]; y < b.offset[0] + b.extent[0]; ++y)
      for (std::int64_t x = b.offset[1]; x < b.offset[1] + b.extent[1]; ++x) seen[static_cast<std::size_t>(y * 6 + x)]++;
  for (int y = 0; y < 4; ++y)
    for (int x = 0; x < 6; ++x) EXPECT_EQ(seen[y * 6 + x], (y >= 1 && y < 3 && x >= 2 && x < 4) ? 0 : 1);
  // Overlapping different boxes come from no single partition.
  EXPECT_THROW(io::PieceCover(shape, {{top, {0, 1}}, {left, {0, 1}}}, "t"), exa::Error);
}

// Every layout writes (values and moments); the same layout and the next
// one of the list read the values back bit for bit, and each rank alone
// reads values and moments whole. (The moments take the values' path; every
// single piece of every layout reads a whole checkpoint in the next test.
// Collective saves and loads are what cost time at 4 oversubscribed ranks.)
TEST(CheckpointBoxes, EveryLayoutWritesWhatOthersRead) {
  const auto c = config();
  auto whole = make_store(c, model::whole_shards(model::parameter_specs(c)));
  auto whole_m = make_moments(whole);
  const std::string ckpt = scratch_dir();
  std::uint64_t step = 0;
  for (const Split& w : splits()) {
    ++step;
    auto p = make_store(c, rank_shards(c, w));
    expect_piece_of(whole, nullptr, p, nullptr, "initialised " + name_of(w));
    auto m = make_moments(p);
    EXPECT_EQ(error_of([&] { io::save_checkpoint(ckpt, p, &m.state, meta_of(step, w), MPI_COMM_WORLD); }), "")
        << name_of(w);
    // The stored checksums are the whole tensors', whatever wrote them.
    const auto info = io::inspect_checkpoint(ckpt);
    for (std::size_t i = 0; i < whole.size(); ++i) {
      for (const auto& d : info.datasets) {
        if (d.path == "/model/" + whole.spec(i).name) EXPECT_EQ(d.checksum, kernels::checksum(whole.value(i), 0));
      }
    }
    const auto all = splits();
    const Split next = all[static_cast<std::size_t>(step) % all.size()];
    for (const Split& r : {w, next}) {
      auto q = make_store(c, rank_shards(c, r));
      Kokkos::deep_copy(q.values(), 0.0f);
      EXPECT_EQ(error_of([&] { io::load_checkpoint(ckpt, q, nullptr, MPI_COMM_WORLD); }), "")
          << "written " << name_of(w) << ", read " << name_of(r);
      expect_piece_of(whole, nullptr, q, nullptr, "written " + name_of(w) + ", read " + name_of(r));
    }
    auto alone = make_store(c, model::whole_shards(model::parameter_specs(c)));
    Kokkos::deep_copy(alone.values(), 0.0f);
    auto ma = make_moments(alone, false);
    EXPECT_EQ(error_of([&] { io::load_checkpoint(ckpt, alone, &ma.state, MPI_COMM_SELF); }), "") << name_of(w);
    expect_piece_of(whole, &whole_m, alone, &ma, "written " + name_of(w) + ", read whole alone");
  }
}

// A checkpoint written whole (rank 0 alone) reads into every single piece
// of 2 and 4 tensor-parallel parts, with and without ZeRO inside the boxes,
// one rank loading one piece at a time (the elements it leaves out are
// checksummed from the file).
TEST(CheckpointBoxes, WholeWriteReadsIntoEveryPiece) {
  const auto c = config();
  const std::string ckpt = scratch_dir();
  auto whole = make_store(c, model::whole_shards(model::parameter_specs(c)));
  auto whole_m = make_moments(whole);
  if (world_rank() == 0) {
    EXPECT_EQ(error_of([&] { io::save_checkpoint(ckpt, whole, &whole_m.state, meta_of(1, {}), MPI_COMM_SELF); }),
              "");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  for (int tp : {2, 4}) {
    for (int zero : {1, 3}) {
      for (int k = 0; k < tp; ++k) {
        for (int j = 0; j < zero; ++j) {
          auto q = make_store(c, piece_shards(c, Split{tp, zero}, k, j));
          Kokkos::deep_copy(q.values(), 0.0f);
          auto mq = make_moments(q, false);
          const std::string what =
              "piece " + std::to_string(k) + "/" + std::to_string(tp) + " zero " + std::to_string(j) + "/" +
              std::to_string(zero);
          EXPECT_EQ(error_of([&] { io::load_checkpoint(ckpt, q, &mq.state, MPI_COMM_SELF); }), "") << what;
          expect_piece_of(whole, &whole_m, q, &mq, what);
        }
      }
    }
  }
}

// Pieces that leave part of a tensor unheld, and boxes that overlap without
// being equal, are refused with the tensor and the boxes named.
TEST(CheckpointBoxes, UncoveredOrOverlappingBoxesAreRefused) {
  const auto c = config();
  const auto specs = model::parameter_specs(c);
  const std::string ckpt = scratch_dir();
  const std::size_t w1 = [&] {
    for (std::size_t i = 0; i < specs.size(); ++i)
      if (specs[i].name == "layers.0.mlp.w1") return i;
    return specs.size();
  }();
  // Every rank holds the first half of layers.0.mlp.w1 [12, 8] only.
  auto shards = model::whole_shards(specs);
  const model::Box half = model::partition_box(specs[w1], 0, 2, 0);
  shards[w1] = model::Shard{0, half.numel(), half};
  auto p = make_store(c, shards);
  const std::string e = error_of([&] { io::save_checkpoint(ckpt, p, nullptr, meta_of(1, {}), MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(e, "no rank holds elements [0, 48) of the box offset [6, 0] extent [6, 8] of "
                          "/model/layers.0.mlp.w1"))
      << e;
  // Rank 0 rows [0, 6), the others columns [0, 4): they overlap (at 2+ ranks).
  shards[w1] = world_rank() == 0 ? model::Shard{0, half.numel(), half}
                                 : model::Shard{0, 48, model::partition_box(specs[w1], 1, 2, 0)};
  auto o = make_store(c, shards);
  const std::string e2 = error_of([&] { io::save_checkpoint(ckpt, o, nullptr, meta_of(2, {}), MPI_COMM_WORLD); });
  if (world_size() > 1) {
    EXPECT_TRUE(contains(e2, "ranks 0 and 1 hold overlapping but different boxes of /model/layers.0.mlp.w1")) << e2;
  } else {
    EXPECT_TRUE(contains(e2, "no rank holds")) << e2;
  }
  EXPECT_TRUE(io::list_checkpoints(ckpt).empty());
}
