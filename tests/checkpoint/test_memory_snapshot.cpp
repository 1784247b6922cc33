// Tier-0 memory snapshots (io/checkpoint/memory_snapshot.hpp), run by ctest
// at 1 and 2 ranks: a snapshot written in one layout loads bit for bit in
// others (rows split, whole tensors, columns split with a ZeRO range); a
// segment whose data is damaged is read from its buddy's copy; damaged in
// every copy, the load throws on every rank naming the tensor; a snapshot
// of another model is refused; an incomplete newer step gives way to the
// older complete one; top-k residuals come back per rank, and fold in
// another layout. Collective throughout (no early returns).
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <filesystem>
#include <functional>
#include <fstream>
#include <string>
#include <vector>

#include "core/error.hpp"
#include "io/checkpoint/memory_snapshot.hpp"
#include "io/checkpoint/piece_copy.hpp"
#include "mpi_checkpoint_util.hpp"

namespace fs = std::filesystem;
using namespace exa;
using exa::test::contains;
using exa::test::error_of;
using exa::test::world_rank;
using exa::test::world_size;

namespace {

const std::vector<std::int64_t> kShapeA{8, 6}, kShapeB{10};

// The value a tensor holds at global index g (array a: 0 value, 1 and 2 moments).
float value_at(int tensor, std::int64_t g, int a, float shift) { return shift + 1000.f * a + 100.f * tensor + 0.5f * g; }

// A layout: rank r's shard of each tensor.
using PieceLayout = std::function<model::Shard(int tensor, int rank, int ranks)>;

model::Shard rows(int t, int r, int n) {
  if (t == 1) {  // a ZeRO range of the whole 1-d tensor
    const std::int64_t lo = 10 * r / n, hi = 10 * (r + 1) / n;
    return model::Shard{lo, hi - lo, model::Box{{0}, {10}}};
  }
  const std::int64_t lo = 8 * r / n, hi = 8 * (r + 1) / n;
  return model::Shard{0, (hi - lo) * 6, model::Box{{lo, 0}, {hi - lo, 6}}};
}
model::Shard whole(int t, int, int) {
  const auto& s = t == 0 ? kShapeA : kShapeB;
  std::int64_t n = 1;
  for (auto e : s) n *= e;
  return model::Shard{0, n, model::whole_box(s)};
}
// Columns split the other way round, then a range that leaves the first
// element to the other rank's replica... (ranks hold all of their box when alone)
model::Shard cols(int t, int r, int n) {
  if (t == 1) return whole(t, r, n);
  const int part = n - 1 - r;  // reversed
  const std::int64_t lo = 6 * part / n, hi = 6 * (part + 1) / n;
  return model::Shard{0, 8 * (hi - lo), model::Box{{0, lo}, {8, hi - lo}}};
}

struct Held {
  std::vector<io::CheckpointTensor> tensors;
  io::OptimizerState optim;
};

std::int64_t global_index(const model::Shard& s, const std::vector<std::int64_t>& shape, std::int64_t k) {
  std::int64_t g = 0, rest = k;
  std::vector<std::int64_t> c(shape.size());
  for (std::size_t d = shape.size(); d-- > 0;) {
    c[d] = rest % s.box.extent[d];
    rest /= s.box.extent[d];
  }
  for (std::size_t d = 0; d < shape.size(); ++d) g = g * shape[d] + s.box.offset[d] + c[d];
  return g;
}

// This rank's pieces in `layout`, filled with value_at(shift) or zero.
Held make(const PieceLayout& layout, bool fill, float shift = 0.f) {
  Held h;
  for (int t = 0; t < 2; ++t) {
    const auto& shape = t == 0 ? kShapeA : kShapeB;
    const std::string name = t == 0 ? "w" : "b";
    const model::Shard s = layout(t, world_rank(), world_size());
    View1<float> arrays[3];
    for (int a = 0; a < 3; ++a) {
      arrays[a] = View1<float>("snap", std::size_t(s.count));
      auto m = Kokkos::create_mirror_view(arrays[a]);
      for (std::int64_t k = 0; k < s.count; ++k)
        m(k) = fill ? value_at(t, global_index(s, shape, s.offset + k), a, shift) : 0.f;
      Kokkos::deep_copy(arrays[a], m);
    }
    h.tensors.push_back(io::CheckpointTensor{name, shape, s, arrays[0]});
    h.optim[name] = io::OptimizerMoments{arrays[1], arrays[2]};
  }
  return h;
}

// Mismatching elements against value_at(shift).
int wrong(const Held& h, float shift = 0.f) {
  int bad = 0;
  for (int t = 0; t < 2; ++t) {
    const auto& tt = h.tensors[std::size_t(t)];
    const View1<float> arrays[3] = {tt.value, h.optim.at(tt.name).exp_avg, h.optim.at(tt.name).exp_avg_sq};
    for (int a = 0; a < 3; ++a) {
      auto m = Kokkos::create_mirror_view(arrays[a]);
      Kokkos::deep_copy(m, arrays[a]);
      for (std::int64_t k = 0; k < tt.shard.count; ++k)
        bad += m(k) != value_at(t, global_index(tt.shard, tt.shape, tt.shard.offset + k), a, shift);
    }
  }
  return bad;
}

io::MemoryJob job_for(const std::string& dir, const Held& h) { return io::memory_job(dir + "/shm", dir + "/run", h.tensors); }

io::CheckpointMeta meta_at(std::uint64_t step) {
  io::CheckpointMeta m;
  m.step = step;
  m.tokens_seen = 7 * step;
  m.lr_schedule = {{"lr", 3e-3}, {"next_step", double(step)}};
  m.deck = "[model]\n";
  return m;
}

int buddy() { return (world_rank() + 1) % world_size(); }

// Flips one byte in the data part of a segment (its last byte).
void damage(const std::string& path) {
  std::fstream f(path, std::ios::in | std::ios::out | std::ios::binary);
  f.seekg(-1, std::ios::end);
  char c = 0;
  f.read(&c, 1);
  c ^= 0x5a;
  f.seekp(-1, std::ios::end);
  f.write(&c, 1);
}

std::vector<std::string> segments(const std::string& dir) {
  std::vector<std::string> out;
  for (const auto& e : fs::directory_iterator(dir + "/shm")) out.push_back(e.path().string());
  std::sort(out.begin(), out.end());
  return out;
}

}  // namespace

TEST(PieceCopy, CopiesTheSharedRowsOfTwoPieces) {
  // Rows [2, 6) of an 8x6 tensor, elements 3..20 of that box, into columns
  // [1, 4) of the whole tensor.
  const io::Piece src{model::Box{{2, 0}, {4, 6}}, {3, 21}};
  const io::Piece dst{model::Box{{0, 1}, {8, 3}}, {0, 24}};
  std::vector<float> s(18), d(24, -1.f);
  for (int k = 0; k < 18; ++k) s[std::size_t(k)] = float(3 + k);  // box element index
  std::vector<char> filled(24, 0);
  const auto n = io::copy_piece_overlap(src, s.data(), dst, d.data(), filled);
  int expect = 0;
  for (int row = 0; row < 8; ++row)
    for (int col = 1; col < 4; ++col) {
      const int k_src = (row - 2) * 6 + col, k_dst = row * 3 + (col - 1);
      const bool held = row >= 2 && row < 6 && k_src >= 3 && k_src < 21;
      expect += held;
      EXPECT_EQ(filled[std::size_t(k_dst)], held ? 1 : 0) << row << "," << col;
      if (held) EXPECT_EQ(d[std::size_t(k_dst)], float(k_src));
    }
  EXPECT_EQ(n, expect);
}

TEST(MemorySnapshot, LoadsInAnyLayoutAndRepairsFromTheBuddyCopy) {
  const std::string dir = exa::test::scratch_dir("memsnap");
  const Held saved = make(rows, true);
  const auto job = job_for(dir, saved);
  // An older step, then the one to load.
  EXPECT_TRUE(io::save_memory_snapshot(job, 1, make(rows, true, 9.f).tensors, make(rows, true, 9.f).optim,
                                       meta_at(2), buddy(), MPI_COMM_WORLD)
                  .ok);
  EXPECT_TRUE(io::save_memory_snapshot(job, 1, saved.tensors, saved.optim, meta_at(3), buddy(), MPI_COMM_WORLD).ok);
  MPI_Barrier(MPI_COMM_WORLD);
  const std::size_t per_rank = world_size() > 1 ? 2 : 1;
  EXPECT_EQ(segments(dir).size(), per_rank * std::size_t(world_size()));  // step 2 removed

  for (const PieceLayout& layout : {PieceLayout(rows), PieceLayout(whole), PieceLayout(cols)}) {
    std::vector<std::string> notes;
    const auto c = io::newest_memory_snapshot(job, notes);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->step, 3u);
    Held into = make(layout, false);
    const auto meta = io::load_memory_snapshot(*c, into.tensors, into.optim, MPI_COMM_WORLD, notes);
    EXPECT_EQ(meta.step, 3u);
    EXPECT_EQ(meta.tokens_seen, 21u);
    EXPECT_EQ(meta.lr_schedule.at("lr"), 3e-3);
    EXPECT_EQ(wrong(into), 0);
  }

  if (world_size() > 1) {
    // Rank 0's own segment damaged: its pieces come from rank 1's copy.
    if (world_rank() == 0)
      for (const auto& seg : segments(dir))
        if (contains(seg, "-o0-h0")) damage(seg);
    MPI_Barrier(MPI_COMM_WORLD);
    std::vector<std::string> notes;
    const auto c = io::newest_memory_snapshot(job, notes);
    ASSERT_TRUE(c.has_value());
    Held into = make(whole, false);
    io::load_memory_snapshot(*c, into.tensors, into.optim, MPI_COMM_WORLD, notes);
    EXPECT_EQ(wrong(into), 0);
    bool noted = false;
    for (const auto& n : notes) noted |= contains(n, "fails its checksum; trying its next copy");
    EXPECT_TRUE(noted);
  }
  // Damaged in every copy: the load refuses on every rank, naming the tensor.
  MPI_Barrier(MPI_COMM_WORLD);
  // (With 2 ranks the own copy is damaged already: flipping it again would mend it.)
  if (world_rank() == 0)
    for (const auto& s : segments(dir))
      if (contains(s, world_size() > 1 ? "-o0-h1" : "-o0-h0")) damage(s);
  MPI_Barrier(MPI_COMM_WORLD);
  {
    std::vector<std::string> notes;
    const auto c = io::newest_memory_snapshot(job, notes);
    ASSERT_TRUE(c.has_value());
    Held into = make(whole, false);
    const std::string e = error_of([&] { io::load_memory_snapshot(*c, into.tensors, into.optim, MPI_COMM_WORLD, notes); });
    EXPECT_TRUE(contains(e, "verifies in no copy")) << e;
    auto m = Kokkos::create_mirror_view(into.tensors[0].value);
    Kokkos::deep_copy(m, into.tensors[0].value);
    EXPECT_EQ(m(0), 0.f);  // nothing was loaded
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) io::remove_memory_snapshots(job);
  MPI_Barrier(MPI_COMM_WORLD);
}

TEST(MemorySnapshot, RefusesAnotherModelAndSkipsAnIncompleteStep) {
  const std::string dir = exa::test::scratch_dir("memsnap-model");
  const Held saved = make(rows, true);
  const auto job = job_for(dir, saved);
  EXPECT_TRUE(io::save_memory_snapshot(job, 5, saved.tensors, saved.optim, meta_at(4), buddy(), MPI_COMM_WORLD).ok);
  const std::string keep = dir + "/step4";
  if (world_rank() == 0) fs::copy(dir + "/shm", keep);
  // A newer step whose rank-0 segments (own and copy) are lost: incomplete,
  // so the older complete step is taken.
  EXPECT_TRUE(io::save_memory_snapshot(job, 6, saved.tensors, saved.optim, meta_at(6), buddy(), MPI_COMM_WORLD).ok);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) {
    for (const auto& s : segments(dir))
      if (contains(s, "-o0-")) fs::remove(s);
    fs::copy(keep, dir + "/shm");
  }
  MPI_Barrier(MPI_COMM_WORLD);
  {
    std::vector<std::string> notes;
    const auto c = io::newest_memory_snapshot(job, notes);
    ASSERT_TRUE(c.has_value());
    EXPECT_EQ(c->step, 4u);
    bool incomplete = false;
    for (const auto& n : notes) incomplete |= contains(n, "step-6 snapshot is incomplete");
    if (world_size() > 1) EXPECT_TRUE(incomplete);  // alone, rank 0's segments were the whole step
  }
  std::vector<std::string> notes;
  // The same run directory, another model (a tensor of another shape).
  EXPECT_TRUE(io::save_memory_snapshot(job, 6, saved.tensors, saved.optim, meta_at(7), buddy(), MPI_COMM_WORLD).ok);
  Held other = make(rows, true);
  other.tensors[1].shape = {12};
  const auto job2 = io::memory_job(dir + "/shm", dir + "/run", other.tensors);
  notes.clear();
  EXPECT_FALSE(io::newest_memory_snapshot(job2, notes).has_value());
  bool refused = false;
  for (const auto& n : notes) refused |= contains(n, "written for another model");
  EXPECT_TRUE(refused);
  // Another run directory sees nothing.
  const auto job3 = io::memory_job(dir + "/shm", dir + "/other-run", saved.tensors);
  EXPECT_FALSE(io::newest_memory_snapshot(job3, notes).has_value());
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) EXPECT_GT(io::remove_memory_snapshots(job), 0);
  MPI_Barrier(MPI_COMM_WORLD);
}

namespace {

// Rank r's top-k residual at global index g of tensor w.
float owed_at(std::int64_t g, int r) { return float(r + 1) * (0.25f * float(g) + 1.f); }

// Gives tensor w a residual over its box: owed_at(this rank) or zeros.
void add_residual(Held& h, bool fill) {
  const auto& t = h.tensors[0];
  const std::int64_t n = t.shard.box.numel();
  View1<float> r("owed", std::size_t(n));
  auto m = Kokkos::create_mirror_view(r);
  const model::Shard box{0, n, t.shard.box};
  for (std::int64_t k = 0; k < n; ++k) m(k) = fill ? owed_at(global_index(box, t.shape, k), world_rank()) : 0.f;
  Kokkos::deep_copy(r, m);
  h.optim[t.name].has_residual = true;
  h.optim[t.name].residual = r;
}

}  // namespace

// Top-k's residuals (io/checkpoint.hpp's rule, as the disk tiers have it):
// written by replicas that each hold the whole of w, they come back to each
// rank as its own row in the same layout; in a layout where each rank
// holds its own rows of w (one holder a box), every holder gets the sum of
// the rows over its box. A snapshot without them loads zeros, with a note.
TEST(MemorySnapshot, TopkResidualsComeBackAndFoldIntoAnotherLayout) {
  const std::string dir = exa::test::scratch_dir("memsnap_topk");
  Held saved = make(whole, true);
  add_residual(saved, true);
  const auto job = job_for(dir, saved);
  ASSERT_TRUE(io::save_memory_snapshot(job, 1, saved.tensors, saved.optim, meta_at(4), buddy(), MPI_COMM_WORLD).ok);
  MPI_Barrier(MPI_COMM_WORLD);
  auto residual_of = [&](const PieceLayout& layout) {
    std::vector<std::string> notes;
    const auto c = io::newest_memory_snapshot(job, notes);
    EXPECT_TRUE(c.has_value());
    Held into = make(layout, false);
    add_residual(into, false);
    io::load_memory_snapshot(*c, into.tensors, into.optim, MPI_COMM_WORLD, notes);
    EXPECT_EQ(wrong(into), 0);
    const auto& t = into.tensors[0];
    auto m = Kokkos::create_mirror_view(into.optim.at("w").residual);
    Kokkos::deep_copy(m, into.optim.at("w").residual);
    std::vector<std::pair<std::int64_t, float>> out;  // (global index, owed)
    const model::Shard box{0, t.shard.box.numel(), t.shard.box};
    for (std::int64_t k = 0; k < box.count; ++k) out.emplace_back(global_index(box, t.shape, k), m(k));
    return out;
  };
  for (const auto& [g, v] : residual_of(whole)) EXPECT_EQ(v, owed_at(g, world_rank())) << g;
  float all = 0;  // every old row's factor, summed
  for (int r = 0; r < world_size(); ++r) all += float(r + 1);
  for (const auto& [g, v] : residual_of(rows)) EXPECT_EQ(v, world_size() == 1 ? owed_at(g, 0) : all * (0.25f * float(g) + 1.f)) << g;

  // Written without residuals: zeros and a note.
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) io::remove_memory_snapshots(job);
  MPI_Barrier(MPI_COMM_WORLD);
  const Held plain = make(whole, true);
  ASSERT_TRUE(io::save_memory_snapshot(job, 1, plain.tensors, plain.optim, meta_at(5), buddy(), MPI_COMM_WORLD).ok);
  std::vector<std::string> notes;
  const auto c = io::newest_memory_snapshot(job, notes);
  ASSERT_TRUE(c.has_value());
  Held into = make(whole, false);
  add_residual(into, true);
  io::load_memory_snapshot(*c, into.tensors, into.optim, MPI_COMM_WORLD, notes);
  auto m = Kokkos::create_mirror_view(into.optim.at("w").residual);
  Kokkos::deep_copy(m, into.optim.at("w").residual);
  for (std::size_t k = 0; k < m.extent(0); ++k) EXPECT_EQ(m(k), 0.f) << k;
  bool noted = false;
  for (const auto& n : notes) noted |= contains(n, "holds no top-k residuals");
  EXPECT_EQ(noted, world_rank() == 0);
  MPI_Barrier(MPI_COMM_WORLD);
  if (world_rank() == 0) io::remove_memory_snapshots(job);
  MPI_Barrier(MPI_COMM_WORLD);
}
