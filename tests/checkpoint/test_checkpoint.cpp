// HDF5 checkpoints through MPI-IO, run by ctest at 1 and 2 ranks.
//
// Every test is collective: all ranks run the same sequence of checkpoint
// calls (EXPECT_*, never an early return, around them). Layout independence
// is tested inside one run by switching communicators: a file written by the
// world with split shards is read back by each rank alone (MPI_COMM_SELF) with
// whole tensors, and the other way round.
#include <fcntl.h>
#include <gtest/gtest.h>
#include <hdf5.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iterator>
#include <string>
#include <vector>

#include "comm/mpi_env.hpp"
#include "core/error.hpp"
#include "core/runtime.hpp"
#include "io/checkpoint/checkpoint.hpp"
#include "io/checkpoint/checkpoint_report.hpp"
#include "io/checkpoint/flat_range.hpp"
#include "kernels/checksum.hpp"
#include "model/parameter_store.hpp"
#include "mpi_checkpoint_util.hpp"

namespace fs = std::filesystem;
using namespace exa;
using exa::io::FlatRange;
using exa::test::contains;
using exa::test::error_of;
using exa::test::world_rank;
using exa::test::world_size;

namespace {

std::string scratch_dir() { return test::scratch_dir("examoe-ckpt-test"); }

// Every model option on, tiny: layer 0 MoE (with a shared expert), layer 1 dense, GQA, untied.
model::ModelConfig tiny_config() {
  model::ModelConfig c;
  c.vocab_size = 16;
  c.d_model = 8;
  c.n_layers = 2;
  c.n_heads = 2;
  c.n_kv_heads = 1;
  c.d_ff = 12;
  c.n_experts = 3;
  c.top_k = 2;
  c.d_expert = 4;
  c.moe_every = 2;
  c.n_shared_experts = 1;
  return c;
}

// Tensor i split over `parts` ranks at uneven points; 1-D gains go wholly to
// the last part (the others hold an empty shard).
std::vector<model::Shard> split_shards(const std::vector<model::ParamSpec>& specs, int part, int parts) {
  std::vector<model::Shard> s;
  for (std::size_t i = 0; i < specs.size(); ++i) {
    const std::int64_t n = specs[i].numel();
    if (specs[i].shape.size() == 1) {
      s.push_back(part == parts - 1 ? model::Shard{0, n} : model::Shard{n, 0});
      continue;
    }
    auto cut = [&](int k) -> std::int64_t {
      if (k <= 0) return 0;
      if (k >= parts) return n;
      // Uneven, and not on row boundaries: (2k+1)/(2·parts) of n plus a shift by i.
      return std::min<std::int64_t>(n, (n * (2 * k + 1)) / (2 * parts) + static_cast<std::int64_t>(i % 5));
    };
    s.push_back(model::Shard{cut(part), cut(part + 1) - cut(part)});
  }
  return s;
}

model::ParameterStore make_store(const model::ModelConfig& c, std::vector<model::Shard> shards = {}) {
  auto specs = model::parameter_specs(c);
  if (shards.empty()) shards = model::whole_shards(specs);
  model::ParameterStore p(specs, shards);
  p.initialize(1234);
  return p;
}

// A value of tensor `name` at global index g that differs per tensor and salt.
float moment_value(const std::string& name, std::int64_t g, int salt) {
  const std::uint64_t h = kernels::checksum_leaf(name, static_cast<std::uint64_t>(g) * 4 + salt);
  return static_cast<float>(static_cast<double>(h >> 40) / double(1 << 24) - 0.5) * (salt == 1 ? 1.0f : 1e-3f);
}

struct Moments {
  std::vector<View1<float>> keep;  // owns the Views
  io::OptimizerState state;
};

Moments make_moments(const model::ParameterStore& p, bool fill = true) {
  Moments m;
  for (std::size_t i = 0; i < p.size(); ++i) {
    const auto& sh = p.shard(i);
    io::OptimizerMoments om{View1<float>("exp_avg", sh.count), View1<float>("exp_avg_sq", sh.count)};
    if (fill) {
      auto a = Kokkos::create_mirror_view(om.exp_avg);
      auto b = Kokkos::create_mirror_view(om.exp_avg_sq);
      for (std::int64_t k = 0; k < sh.count; ++k) {
        a(k) = moment_value(p.spec(i).name, sh.offset + k, 1);
        b(k) = std::abs(moment_value(p.spec(i).name, sh.offset + k, 2));
      }
      Kokkos::deep_copy(om.exp_avg, a);
      Kokkos::deep_copy(om.exp_avg_sq, b);
    }
    m.state[p.spec(i).name] = om;
  }
  return m;
}

io::CheckpointMeta make_meta(std::uint64_t step) {
  io::CheckpointMeta m;
  m.step = step;
  m.tokens_seen = step * 1024 + 7;
  m.data_cursor = step * 8 + 3;
  m.rng_state = {0x0123456789abcdefull, step, ~0ull};
  m.lr_schedule = {{"lr", 3e-3 * 0.1 * static_cast<double>(step)}, {"warmup_steps", 30}, {"min_lr", 3e-4}};
  m.deck = "# tiny\n[model]\nd_model = 8  # \xc2\xb5-sized\n";
  m.config_json = R"({"model":{"d_model":8}})";
  m.layout.world_size = world_size();
  m.layout.dp = world_size();
  m.layout.zero = 1;
  return m;
}

// Host copy of a flat View.
std::vector<float> host(const View1<float>& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<float>(h.data(), h.data() + h.extent(0));
}

// Bitwise equality of b's shards with the same elements of a (any shards).
::testing::AssertionResult same_bits(const std::vector<float>& a, std::int64_t a_off, const std::vector<float>& b,
                                     std::int64_t b_off, const std::string& what) {
  const std::int64_t lo = std::max(a_off, b_off);
  const std::int64_t hi =
      std::min(a_off + static_cast<std::int64_t>(a.size()), b_off + static_cast<std::int64_t>(b.size()));
  for (std::int64_t g = lo; g < hi; ++g) {
    if (std::memcmp(&a[static_cast<std::size_t>(g - a_off)], &b[static_cast<std::size_t>(g - b_off)], 4) != 0) {
      return ::testing::AssertionFailure() << what << " differs at element " << g;
    }
  }
  return ::testing::AssertionSuccess();
}

// Expects every shard of `got` to hold exactly the values of `want` (whole or sharded).
void expect_same_values(const model::ParameterStore& want, const model::ParameterStore& got) {
  ASSERT_EQ(want.size(), got.size());
  for (std::size_t i = 0; i < want.size(); ++i) {
    EXPECT_TRUE(same_bits(host(want.value(i)), want.shard(i).offset, host(got.value(i)),
                          got.shard(i).offset, want.spec(i).name));
  }
}

void expect_same_moments(const model::ParameterStore& want_p, const Moments& want, const model::ParameterStore& got_p,
                         const Moments& got) {
  for (std::size_t i = 0; i < want_p.size(); ++i) {
    const auto& n = want_p.spec(i).name;
    EXPECT_TRUE(same_bits(host(want.state.at(n).exp_avg), want_p.shard(i).offset, host(got.state.at(n).exp_avg),
                          got_p.shard(i).offset, "exp_avg " + n));
    EXPECT_TRUE(same_bits(host(want.state.at(n).exp_avg_sq), want_p.shard(i).offset,
                          host(got.state.at(n).exp_avg_sq), got_p.shard(i).offset, "exp_avg_sq " + n));
  }
}

void expect_same_meta(const io::CheckpointMeta& a, const io::CheckpointMeta& b) {
  EXPECT_EQ(a.step, b.step);
  EXPECT_EQ(a.tokens_seen, b.tokens_seen);
  EXPECT_EQ(a.data_cursor, b.data_cursor);
  EXPECT_EQ(a.rng_state, b.rng_state);
  EXPECT_EQ(a.lr_schedule, b.lr_schedule);
  EXPECT_EQ(a.deck, b.deck);
  EXPECT_EQ(a.config_json, b.config_json);
  EXPECT_TRUE(a.layout == b.layout);
}

// Sharded store of the world (whole tensors at one rank).
model::ParameterStore world_store(const model::ModelConfig& c) {
  return make_store(c, split_shards(model::parameter_specs(c), world_rank(), world_size()));
}

// Runs f on rank 0 alone, then meets the other ranks.
void on_rank0(const std::function<void()>& f) {
  if (world_rank() == 0) f();
  MPI_Barrier(MPI_COMM_WORLD);
}

std::string ckpt_of(const std::string& dir) { return (fs::path(dir) / "ckpt").string(); }

// Rank 0 flips one bit of byte `at` of a dataset's raw data in `file`.
void flip_dataset_byte(const std::string& file, const std::string& dataset, off_t at) {
  on_rank0([&] {
    hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    hid_t d = H5Dopen2(f, dataset.c_str(), H5P_DEFAULT);
    const haddr_t off = H5Dget_offset(d);
    H5Dclose(d);
    H5Fclose(f);
    ASSERT_NE(off, HADDR_UNDEF);
    const int fd = ::open(file.c_str(), O_RDWR);
    ASSERT_GE(fd, 0);
    unsigned char b = 0;
    ASSERT_EQ(::pread(fd, &b, 1, static_cast<off_t>(off) + at), 1);
    b ^= 0x10;
    ASSERT_EQ(::pwrite(fd, &b, 1, static_cast<off_t>(off) + at), 1);
    ::close(fd);
  });
}

// ---- flat ranges ---------------------------------------------------------------------

TEST(FlatRange, BlocksCoverExactlyTheRangeInRowMajorOrder) {
  const std::vector<std::vector<std::int64_t>> shapes = {{7}, {3, 4}, {2, 3, 4}, {3, 1, 2, 3}, {1, 5}, {4, 1}};
  for (const auto& shape : shapes) {
    std::int64_t n = 1;
    for (auto s : shape) n *= s;
    for (std::int64_t off = 0; off <= n; ++off) {
      for (std::int64_t cnt = 0; off + cnt <= n; ++cnt) {
        const auto blocks = io::flat_range_blocks(shape, off, cnt);
        EXPECT_LE(blocks.size(), 2 * shape.size() - 1);
        std::vector<std::int64_t> seen;
        for (const auto& b : blocks) {
          // Enumerate the block's elements in row-major order.
          std::vector<std::int64_t> idx(shape.size(), 0);
          std::int64_t total = 1;
          for (auto c : b.count) total *= c;
          EXPECT_GT(total, 0);
          for (std::int64_t e = 0; e < total; ++e) {
            std::int64_t rem = e, flat = 0;
            for (std::size_t d = shape.size(); d-- > 0;) {
              idx[d] = b.start[d] + rem % b.count[d];
              rem /= b.count[d];
            }
            for (std::size_t d = 0; d < shape.size(); ++d) flat = flat * shape[d] + idx[d];
            seen.push_back(flat);
          }
        }
        std::vector<std::int64_t> want(static_cast<std::size_t>(cnt));
        for (std::int64_t k = 0; k < cnt; ++k) want[static_cast<std::size_t>(k)] = off + k;
        EXPECT_EQ(seen, want) << "shape rank " << shape.size() << " off " << off << " cnt " << cnt;
      }
    }
  }
  EXPECT_THROW(io::flat_range_blocks({3, 4}, 10, 3), exa::Error);
}

TEST(FlatRange, OwnershipPartitionsWhateverTheOverlap) {
  // rank 0 [2,6), rank 1 [0,10) (overlaps 0), rank 2 [4,12), rank 3 empty; numel 14.
  const std::vector<FlatRange> r = {{2, 6}, {0, 10}, {4, 12}, {5, 5}};
  EXPECT_EQ(io::owned_ranges(r, 0), (std::vector<FlatRange>{{2, 6}}));
  EXPECT_EQ(io::owned_ranges(r, 1), (std::vector<FlatRange>{{0, 2}, {6, 10}}));
  EXPECT_EQ(io::owned_ranges(r, 2), (std::vector<FlatRange>{{10, 12}}));
  EXPECT_TRUE(io::owned_ranges(r, 3).empty());
  EXPECT_EQ(io::uncovered_ranges(r, 14), (std::vector<FlatRange>{{12, 14}}));
  EXPECT_EQ(io::uncovered_ranges({{0, 0}, {3, 5}}, 6), (std::vector<FlatRange>{{0, 3}, {5, 6}}));
}

// ---- round trips and layout independence -----------------------------------------------

TEST(Checkpoint, RoundTripIsBitIdentical) {
  const std::string dir = scratch_dir();
  const auto c = tiny_config();
  auto p = world_store(c);
  auto m = make_moments(p);
  const auto meta = make_meta(5);
  std::string saved;
  EXPECT_EQ(error_of([&] { saved = io::save_checkpoint(ckpt_of(dir), p, &m.state, meta, MPI_COMM_WORLD); }), "");
  EXPECT_EQ(fs::path(saved).filename().string(), "step_00000005");

  auto q = make_store(c, split_shards(model::parameter_specs(c), world_rank(), world_size()));
  Kokkos::deep_copy(q.values(), 0.0f);
  auto mq = make_moments(q, false);
  io::CheckpointMeta got;
  EXPECT_EQ(error_of([&] { got = io::load_checkpoint(dir, q, &mq.state, MPI_COMM_WORLD); }), "");
  expect_same_values(p, q);
  expect_same_moments(p, m, q, mq);
  expect_same_meta(meta, got);
  EXPECT_TRUE(got.has_optimizer);
  EXPECT_EQ(got.format_version, 1);
  EXPECT_EQ(fs::path(got.directory).filename().string(), "step_00000005");
}

TEST(Checkpoint, ShardedWriteReadsBackWholeOnEachRankAlone) {
  const std::string dir = scratch_dir();
  const auto c = tiny_config();
  auto p = world_store(c);
  auto m = make_moments(p);
  EXPECT_EQ(error_of([&] { io::save_checkpoint(ckpt_of(dir), p, &m.state, make_meta(1), MPI_COMM_WORLD); }), "");
  // Each rank alone, whole tensors.
  auto whole = make_store(c);
  auto mw = make_moments(whole);
  auto q = make_store(c);
  Kokkos::deep_copy(q.values(), 0.0f);
  auto mq = make_moments(q, false);
  EXPECT_EQ(error_of([&] { io::load_checkpoint(dir, q, &mq.state, MPI_COMM_SELF); }), "");
  expect_same_values(whole, q);
  expect_same_moments(whole, mw, q, mq);
}

TEST(Checkpoint, WholeWriteReadsBackSharded) {
  const std::string dir = scratch_dir();
  const auto c = tiny_config();
  on_rank0([&] {
    auto p = make_store(c);
    auto m = make_moments(p);
    EXPECT_EQ(error_of([&] { io::save_checkpoint(ckpt_of(dir), p, &m.state, make_meta(1), MPI_COMM_SELF); }), "");
  });
  auto whole = make_store(c);
  auto mw = make_moments(whole);
  // The world, split.
  auto q = world_store(c);
  Kokkos::deep_copy(q.values(), 0.0f);
  auto mq = make_moments(q, false);
  EXPECT_EQ(error_of([&] { io::load_checkpoint(dir, q, &mq.state, MPI_COMM_WORLD); }), "");
  expect_same_values(whole, q);
  expect_same_moments(whole, mw, q, mq);
  // Two halves read one after the other by one rank (partial hyperslabs,
  // and checksums that need the elements nobody loads).
  for (int part = 0; part < 2; ++part) {
    auto h = make_store(c, split_shards(model::parameter_specs(c), part, 2));
    Kokkos::deep_copy(h.values(), 0.0f);
    EXPECT_EQ(error_of([&] { io::load_checkpoint(dir, h, nullptr, MPI_COMM_SELF); }), "");
    expect_same_values(whole, h);
  }
}

TEST(Checkpoint, ReplicatedShardsWriteEachElementOnce) {
  // Every rank holds the whole model (plain data parallelism): the writer
  // deduplicates, the reader lets every replica read everything.
  const std::string dir = scratch_dir();
  const auto c = tiny_config();
  auto p = make_store(c);
  EXPECT_EQ(error_of([&] { io::save_checkpoint(ckpt_of(dir), p, nullptr, make_meta(2), MPI_COMM_WORLD); }), "");
  auto q = make_store(c);
  Kokkos::deep_copy(q.values(), 0.0f);
  EXPECT_EQ(error_of([&] { io::load_checkpoint(dir, q, nullptr, MPI_COMM_WORLD); }), "");
  expect_same_values(p, q);
  const auto info = io::inspect_checkpoint(dir);
  EXPECT_EQ(info.datasets.size(), p.size());
  EXPECT_FALSE(info.meta.has_optimizer);
}

TEST(Checkpoint, ShardsThatLeaveAGapAreRefused) {
  const std::string dir = scratch_dir();
  const auto c = tiny_config();
  auto specs = model::parameter_specs(c);
  auto shards = model::whole_shards(specs);
  shards[0].count -= 1;  // nobody holds the last element of embed.weight
  auto p = make_store(c, shards);
  const std::string e = error_of([&] { io::save_checkpoint(ckpt_of(dir), p, nullptr, make_meta(1), MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(e, "no rank holds elements [127, 128) of /model/embed.weight")) << e;
  EXPECT_TRUE(io::list_checkpoints(ckpt_of(dir)).empty());
}

TEST(Checkpoint, ChecksumAttributesAreWholeTensorChecksums) {
  const std::string dir = scratch_dir();
  const auto c = tiny_config();
  auto p = world_store(c);
  auto m = make_moments(p);
  EXPECT_EQ(error_of([&] { io::save_checkpoint(ckpt_of(dir), p, &m.state, make_meta(3), MPI_COMM_WORLD); }), "");
  auto whole = make_store(c);
  auto mw = make_moments(whole);
  const auto info = io::inspect_checkpoint(ckpt_of(dir));
  EXPECT_EQ(info.datasets.size(), 3 * whole.size());
  std::vector<std::pair<std::string, std::uint64_t>> entries;
  for (std::size_t i = 0; i < whole.size(); ++i) {
    const auto& n = whole.spec(i).name;
    const std::pair<std::string, View1<float>> want[] = {{"/model/" + n, whole.value(i)},
                                                         {"/optim/exp_avg/" + n, mw.state.at(n).exp_avg},
                                                         {"/optim/exp_avg_sq/" + n, mw.state.at(n).exp_avg_sq}};
    for (const auto& [path, view] : want) {
      auto it = std::find_if(info.datasets.begin(), info.datasets.end(),
                             [&](const io::DatasetInfo& d) { return d.path == path; });
      ASSERT_NE(it, info.datasets.end()) << path;
      EXPECT_EQ(it->shape, whole.spec(i).shape) << path;
      EXPECT_EQ(it->checksum, kernels::checksum(view, 0)) << path;
      entries.emplace_back(path, it->checksum);
    }
  }
  std::sort(entries.begin(), entries.end());
  EXPECT_EQ(info.meta.merkle_root, kernels::checksum_merkle_root(entries));
  // The raw attribute, as any HDF5 tool sees it.
  on_rank0([&] {
    const std::string file = (fs::path(io::resolve_checkpoint(dir)) / "state.h5").string();
    hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDONLY, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    hid_t d = H5Dopen2(f, "/model/embed.weight", H5P_DEFAULT);
    hid_t a = H5Aopen(d, "checksum", H5P_DEFAULT);
    std::uint64_t v = 0;
    EXPECT_GE(H5Aread(a, H5T_NATIVE_UINT64, &v), 0);
    EXPECT_EQ(v, kernels::checksum(whole.value(0), 0));
    H5Aclose(a);
    H5Dclose(d);
    H5Fclose(f);
  });
}

TEST(Checkpoint, MetadataRoundTripsIncludingALongDeck) {
  const std::string dir = scratch_dir();
  const auto c = tiny_config();
  auto p = world_store(c);
  auto meta = make_meta(9);
  meta.rng_state.clear();
  meta.lr_schedule.clear();
  meta.deck.clear();
  for (int i = 0; i < 6000; ++i) meta.deck += "# a long comment line of the deck, number " + std::to_string(i) + "\n";
  EXPECT_GT(meta.deck.size(), 200000u);  // beyond HDF5's 64 KiB compact attribute limit
  EXPECT_EQ(error_of([&] { io::save_checkpoint(ckpt_of(dir), p, nullptr, meta, MPI_COMM_WORLD); }), "");
  io::CheckpointMeta got;
  EXPECT_EQ(error_of([&] { got = io::load_checkpoint(dir, p, nullptr, MPI_COMM_WORLD); }), "");
  expect_same_meta(meta, got);
  EXPECT_FALSE(got.has_optimizer);
}

// ---- optimizer state is optional ----------------------------------------------------------

TEST(Checkpoint, OptimizerStateIsOptional) {
  const std::string dir = scratch_dir();
  const auto c = tiny_config();
  auto p = world_store(c);
  auto m = make_moments(p);
  // With moments: a model-only load works.
  EXPECT_EQ(error_of([&] { io::save_checkpoint(ckpt_of(dir), p, &m.state, make_meta(1), MPI_COMM_WORLD); }), "");
  auto q = world_store(c);
  EXPECT_EQ(error_of([&] { io::load_checkpoint(dir, q, nullptr, MPI_COMM_WORLD); }), "");
  // Without moments: asking for them is a clear error.
  EXPECT_EQ(error_of([&] { io::save_checkpoint(ckpt_of(dir), p, nullptr, make_meta(2), MPI_COMM_WORLD); }), "");
  auto mq = make_moments(q, false);
  const std::string e = error_of([&] { io::load_checkpoint(dir, q, &mq.state, MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(e, "holds no optimizer state")) << e;
  EXPECT_TRUE(contains(e, "step_00000002")) << e;
  EXPECT_EQ(error_of([&] { io::load_checkpoint(dir, q, nullptr, MPI_COMM_WORLD); }), "");
}

// ---- training state besides the tensors ------------------------------------------------

// State arrays (the router bias of aux-loss-free balancing) round-trip bit
// for bit; rank 0's values are the ones written; inspect lists them (the
// Merkle root covers them); a checkpoint without any loads with none.
TEST(Checkpoint, StateArraysRoundTripFromRankZero) {
  const std::string dir = scratch_dir();
  const auto c = tiny_config();
  auto p = world_store(c);
  auto meta = make_meta(4);
  const std::vector<float> bias = {0.25f, -1e-3f, 3.0e-7f, -0.0f, 1.5f, 2.0f};
  meta.state["router_bias"] = io::StateArray{{2, 3}, bias};
  if (world_rank() != 0) meta.state["router_bias"].values.assign(6, 99.0f);  // not written: rank 0's are
  EXPECT_EQ(error_of([&] { io::save_checkpoint(ckpt_of(dir), p, nullptr, meta, MPI_COMM_WORLD); }), "");
  auto q = world_store(c);
  io::CheckpointMeta got;
  EXPECT_EQ(error_of([&] { got = io::load_checkpoint(dir, q, nullptr, MPI_COMM_WORLD); }), "");
  expect_same_values(p, q);
  ASSERT_EQ(got.state.size(), 1u);
  const auto& s = got.state.at("router_bias");
  EXPECT_EQ(s.shape, (std::vector<std::int64_t>{2, 3}));
  EXPECT_TRUE(same_bits(bias, 0, s.values, 0, "router_bias"));
  EXPECT_EQ(s.values.size(), bias.size());
  const auto info = io::inspect_checkpoint(dir);
  const auto it = std::find_if(info.datasets.begin(), info.datasets.end(),
                               [](const io::DatasetInfo& d) { return d.path == "/state/router_bias"; });
  ASSERT_NE(it, info.datasets.end());
  EXPECT_EQ(it->shape, (std::vector<std::int64_t>{2, 3}));

  EXPECT_EQ(error_of([&] { io::save_checkpoint(ckpt_of(dir), p, nullptr, make_meta(5), MPI_COMM_WORLD); }), "");
  EXPECT_EQ(error_of([&] { got = io::load_checkpoint(dir, q, nullptr, MPI_COMM_WORLD); }), "");
  EXPECT_TRUE(got.state.empty());
}

TEST(Checkpoint, StateArraysAreCheckedLikeTensors) {
  const std::string dir = scratch_dir();
  const auto c = tiny_config();
  auto p = world_store(c);
  auto meta = make_meta(6);
  meta.state["router_bias"] = io::StateArray{{2, 3}, {1, 2, 3, 4, 5}};
  std::string e = error_of([&] { io::save_checkpoint(ckpt_of(dir), p, nullptr, meta, MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(e, "state array 'router_bias' of shape [2, 3] holds 5 values")) << e;
  meta.state["router_bias"].values.push_back(6);
  EXPECT_EQ(error_of([&] { io::save_checkpoint(ckpt_of(dir), p, nullptr, meta, MPI_COMM_WORLD); }), "");
  flip_dataset_byte((fs::path(ckpt_of(dir)) / "step_00000006" / "state.h5").string(), "/state/router_bias", 5);
  auto q = world_store(c);
  e = error_of([&] { io::load_checkpoint(dir, q, nullptr, MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(e, "is corrupt")) << e;
  EXPECT_TRUE(contains(e, "/state/router_bias")) << e;
}

// ---- failures ----------------------------------------------------------------------------

TEST(Checkpoint, CorruptedDatasetByteNamesTheDataset) {
  const std::string dir = scratch_dir();
  const auto c = tiny_config();
  auto p = world_store(c);
  auto m = make_moments(p);
  EXPECT_EQ(error_of([&] { io::save_checkpoint(ckpt_of(dir), p, &m.state, make_meta(10), MPI_COMM_WORLD); }), "");
  EXPECT_EQ(error_of([&] { io::save_checkpoint(ckpt_of(dir), p, &m.state, make_meta(20), MPI_COMM_WORLD); }), "");
  const std::string victim = "/optim/exp_avg/layers.0.attn.wq.weight";
  flip_dataset_byte((fs::path(ckpt_of(dir)) / "step_00000020" / "state.h5").string(), victim, 13);
  auto q = world_store(c);
  auto mq = make_moments(q, false);
  const std::string e = error_of([&] { io::load_checkpoint(ckpt_of(dir), q, &mq.state, MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(e, "is corrupt")) << e;
  EXPECT_TRUE(contains(e, victim)) << e;
  EXPECT_FALSE(contains(e, "/model/layers.0.attn.wq.weight")) << e;
  EXPECT_TRUE(contains(e, "older checkpoint")) << e;
  EXPECT_TRUE(contains(e, "step_00000010")) << e;
  // The model alone is intact and loads; the older checkpoint loads whole.
  EXPECT_EQ(error_of([&] { io::load_checkpoint(ckpt_of(dir), q, nullptr, MPI_COMM_WORLD); }), "");
  EXPECT_EQ(error_of([&] {
              io::load_checkpoint((fs::path(ckpt_of(dir)) / "step_00000010").string(), q, &mq.state, MPI_COMM_WORLD);
            }),
            "");
}

TEST(Checkpoint, TruncatedFileIsAClearError) {
  const std::string dir = scratch_dir();
  const auto c = tiny_config();
  auto p = world_store(c);
  auto m = make_moments(p);
  EXPECT_EQ(error_of([&] { io::save_checkpoint(ckpt_of(dir), p, &m.state, make_meta(1), MPI_COMM_WORLD); }), "");
  const std::string file = (fs::path(ckpt_of(dir)) / "step_00000001" / "state.h5").string();
  std::uintmax_t size = 0;
  on_rank0([&] { size = fs::file_size(file); });
  MPI_Bcast(&size, 1, MPI_UINT64_T, 0, MPI_COMM_WORLD);
  for (std::uintmax_t keep : {size / 2, size - 1, std::uintmax_t{100}, std::uintmax_t{0}}) {
    on_rank0([&] { fs::resize_file(file, keep); });
    auto q = world_store(c);
    auto mq = make_moments(q, false);
    const std::string e = error_of([&] { io::load_checkpoint(ckpt_of(dir), q, &mq.state, MPI_COMM_WORLD); });
    EXPECT_TRUE(contains(e, "truncated or corrupt")) << keep << ": " << e;
    EXPECT_TRUE(contains(e, file)) << e;
    EXPECT_TRUE(contains(e, "restart the run from scratch")) << e;  // no other checkpoint here
    std::string e2;
    on_rank0([&] { e2 = error_of([&] { io::inspect_checkpoint(ckpt_of(dir)); }); });
    if (world_rank() == 0) EXPECT_TRUE(contains(e2, "truncated or corrupt")) << e2;
  }
}

// Flipping any byte of the file (metadata, attributes or data, one at a
// time, at a prime stride) gives an exa::Error or, for bytes HDF5 never
// reads back (free space, padding), a load that still returns exactly the
// saved tensors and metadata: never a crash, never silently wrong values.
TEST(Checkpoint, AFlippedByteAnywhereIsDetectedOrHarmless) {
  const std::string dir = scratch_dir();
  on_rank0([&] {
    const auto c = tiny_config();
    auto p = make_store(c);
    auto m = make_moments(p);
    const auto meta = make_meta(1);
    const std::string saved = io::save_checkpoint(ckpt_of(dir), p, &m.state, meta, MPI_COMM_SELF);
    const std::string file = (fs::path(saved) / "state.h5").string();
    std::string bytes;
    {
      std::ifstream in(file, std::ios::binary);
      bytes.assign(std::istreambuf_iterator<char>(in), std::istreambuf_iterator<char>());
    }
    ASSERT_GT(bytes.size(), 1000u);
    int detected = 0, harmless = 0;
    for (std::size_t at = 0; at < bytes.size(); at += 97) {
      std::string bad = bytes;
      bad[at] = static_cast<char>(bad[at] ^ 0x5a);
      { std::ofstream(file, std::ios::binary | std::ios::trunc) << bad; }
      auto q = make_store(c);
      Kokkos::deep_copy(q.values(), 0.0f);
      auto mq = make_moments(q, false);
      io::CheckpointMeta got;
      const std::string e = error_of([&] { got = io::load_checkpoint(saved, q, &mq.state, MPI_COMM_SELF); });
      // Whatever happened, nothing of the file stays open.
      EXPECT_EQ(H5Fget_obj_count(H5F_OBJ_ALL, H5F_OBJ_ALL), 0) << "byte " << at << ": " << e;
      if (!e.empty()) {
        ++detected;
        EXPECT_TRUE(contains(e, file)) << "byte " << at << ": " << e;
        continue;
      }
      ++harmless;
      expect_same_values(p, q);
      expect_same_moments(p, m, q, mq);
      expect_same_meta(meta, got);
      if (::testing::Test::HasFailure()) {
        ADD_FAILURE() << "flipping byte " << at << " went unnoticed";
        break;
      }
    }
    std::printf("flipped %d bytes: %d detected, %d never read back\n", detected + harmless, detected, harmless);
    EXPECT_GT(detected, harmless);
  });
}

TEST(Checkpoint, WrongShapeNamesDatasetAndShapes) {
  const std::string dir = scratch_dir();
  const auto c = tiny_config();
  std::int64_t dense = 0;  // the dense layer of tiny_config
  while (c.is_moe_layer(dense)) ++dense;
  ASSERT_LT(dense, c.n_layers);
  auto p = world_store(c);
  EXPECT_EQ(error_of([&] { io::save_checkpoint(ckpt_of(dir), p, nullptr, make_meta(1), MPI_COMM_WORLD); }), "");
  {
    auto c2 = c;
    c2.d_ff = 16;
    auto q = world_store(c2);
    const std::string e = error_of([&] { io::load_checkpoint(dir, q, nullptr, MPI_COMM_WORLD); });
    EXPECT_TRUE(contains(e, "dataset /model/layers." + std::to_string(dense) + ".mlp.w1")) << e;
    EXPECT_TRUE(contains(e, "has shape [12, 8] but the model expects [16, 8]")) << e;
    EXPECT_TRUE(contains(e, "written for a different model")) << e;
  }
  {
    auto c2 = c;
    c2.tie_embeddings = true;  // no lm_head
    auto q = world_store(c2);
    const std::string e = error_of([&] { io::load_checkpoint(dir, q, nullptr, MPI_COMM_WORLD); });
    EXPECT_TRUE(contains(e, "holds dataset /model/lm_head.weight [16, 8], which this model does not have")) << e;
  }
  {
    auto c2 = c;
    c2.moe_every = 1;  // the dense layer becomes MoE
    auto q = world_store(c2);
    const std::string e = error_of([&] { io::load_checkpoint(dir, q, nullptr, MPI_COMM_WORLD); });
    EXPECT_TRUE(contains(e, "has no dataset /model/layers." + std::to_string(dense) + ".moe.router.weight [3, 8]"))
        << e;
  }
}

// ---- directories: crashes, latest, retention --------------------------------------------------

TEST(Checkpoint, LeftoverTempDirectoryIsIgnored) {
  const std::string dir = scratch_dir();
  const std::string ck = ckpt_of(dir);
  const auto c = tiny_config();
  auto p = world_store(c);
  EXPECT_EQ(error_of([&] { io::save_checkpoint(ck, p, nullptr, make_meta(1), MPI_COMM_WORLD); }), "");
  // A crash during the save of step 2: its temp directory with half a file.
  const fs::path tmp = fs::path(ck) / ".step_00000002.tmp-999999";
  on_rank0([&] {
    fs::create_directories(tmp);
    std::ofstream(tmp / "state.h5") << "\x89HDF\r\n\x1a\n half a file";
    fs::create_directories(fs::path(ck) / "step_00000003");  // no state.h5: not a checkpoint
    EXPECT_EQ(fs::read_symlink(fs::path(ck) / "latest").string(), "step_00000001");
    EXPECT_EQ(fs::path(io::resolve_checkpoint(ck)).filename().string(), "step_00000001");
    EXPECT_EQ(fs::path(io::resolve_checkpoint(dir)).filename().string(), "step_00000001");
    EXPECT_EQ(io::list_checkpoints(ck).size(), 1u);
  });
  io::CheckpointMeta got;
  EXPECT_EQ(error_of([&] { got = io::load_checkpoint(dir, p, nullptr, MPI_COMM_WORLD); }), "");
  EXPECT_EQ(got.step, 1u);
  // Pointing at the temp directory itself is refused.
  const std::string e = error_of([&] { io::load_checkpoint(tmp.string(), p, nullptr, MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(e, "not a complete checkpoint")) << e;
  // The next save of step 2 succeeds and clears the leftover.
  EXPECT_EQ(error_of([&] { io::save_checkpoint(ck, p, nullptr, make_meta(2), MPI_COMM_WORLD); }), "");
  on_rank0([&] {
    EXPECT_FALSE(fs::exists(tmp));
    EXPECT_EQ(fs::read_symlink(fs::path(ck) / "latest").string(), "step_00000002");
  });
}

TEST(Checkpoint, DanglingLatestFallsBackToNewestComplete) {
  const std::string dir = scratch_dir();
  const std::string ck = ckpt_of(dir);
  const auto c = tiny_config();
  auto p = world_store(c);
  EXPECT_EQ(error_of([&] { io::save_checkpoint(ck, p, nullptr, make_meta(4), MPI_COMM_WORLD); }), "");
  on_rank0([&] {
    fs::remove(fs::path(ck) / "latest");
    fs::create_directory_symlink("step_00000099", fs::path(ck) / "latest");
  });
  io::CheckpointMeta got;
  EXPECT_EQ(error_of([&] { got = io::load_checkpoint(ck, p, nullptr, MPI_COMM_WORLD); }), "");
  EXPECT_EQ(got.step, 4u);
}

TEST(Checkpoint, DirectoryWithoutCompleteCheckpointListsWhatItHolds) {
  const std::string dir = scratch_dir();
  const std::string ck = ckpt_of(dir);
  on_rank0([&] {
    fs::create_directories(fs::path(ck) / ".step_00000005.tmp-4242");
    std::ofstream(fs::path(ck) / "notes.txt") << "hi";
  });
  auto p = world_store(tiny_config());
  const std::string e = error_of([&] { io::load_checkpoint(ck, p, nullptr, MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(e, "holds no complete checkpoint")) << e;
  EXPECT_TRUE(contains(e, ".step_00000005.tmp-4242 (incomplete")) << e;
  EXPECT_TRUE(contains(e, "notes.txt")) << e;
  const std::string e2 = error_of([&] { io::load_checkpoint(dir + "/nope", p, nullptr, MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(e2, "does not exist")) << e2;
}

TEST(Checkpoint, RetentionKeepsTheNewestAndNeverTheUnfinished) {
  const std::string dir = scratch_dir();
  const std::string ck = ckpt_of(dir);
  const auto c = tiny_config();
  auto p = world_store(c);
  io::SaveOptions opt;
  opt.keep = 2;
  for (std::uint64_t s : {1, 2, 3, 4}) {
    EXPECT_EQ(error_of([&] { io::save_checkpoint(ck, p, nullptr, make_meta(s), MPI_COMM_WORLD, opt); }), "");
    on_rank0([&] { EXPECT_EQ(io::list_checkpoints(ck).size(), std::min<std::size_t>(s, 2)); });
  }
  on_rank0([&] {
    const auto all = io::list_checkpoints(ck);
    ASSERT_EQ(all.size(), 2u);
    EXPECT_EQ(all[0].first, 3u);
    EXPECT_EQ(all[1].first, 4u);
    EXPECT_EQ(fs::read_symlink(fs::path(ck) / "latest").string(), "step_00000004");
    for (const auto& e : fs::directory_iterator(ck)) {
      const std::string n = e.path().filename().string();
      EXPECT_TRUE(n == "latest" || n == "step_00000003" || n == "step_00000004") << n;
    }
  });
  // Saving an existing step replaces it in place.
  auto meta = make_meta(4);
  meta.tokens_seen = 999;
  EXPECT_EQ(error_of([&] { io::save_checkpoint(ck, p, nullptr, meta, MPI_COMM_WORLD, opt); }), "");
  io::CheckpointMeta got;
  EXPECT_EQ(error_of([&] { got = io::load_checkpoint(ck, p, nullptr, MPI_COMM_WORLD); }), "");
  EXPECT_EQ(got.tokens_seen, 999u);
  on_rank0([&] { EXPECT_EQ(io::list_checkpoints(ck).size(), 2u); });
  // keep = 0 keeps all.
  opt.keep = 0;
  for (std::uint64_t s : {5, 6, 7}) {
    EXPECT_EQ(error_of([&] { io::save_checkpoint(ck, p, nullptr, make_meta(s), MPI_COMM_WORLD, opt); }), "");
  }
  on_rank0([&] { EXPECT_EQ(io::list_checkpoints(ck).size(), 5u); });
}

TEST(Checkpoint, UnwritableDirectoryFailsCleanly) {
  const std::string dir = scratch_dir();
  auto p = world_store(tiny_config());
  on_rank0([&] { std::ofstream(fs::path(dir) / "ckpt") << "a file where the directory should be"; });
  const std::string e = error_of([&] { io::save_checkpoint(ckpt_of(dir), p, nullptr, make_meta(1), MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(e, "saving checkpoint step 1")) << e;
}

// ---- chunk checksums and the offline check --------------------------------------------

// 7-element chunks: they cross rows, shard boundaries and ranks.
io::SaveOptions small_chunks() {
  io::SaveOptions o;
  o.chunk_elements = 7;
  return o;
}

std::int64_t numel_of(const std::vector<std::int64_t>& shape) {
  std::int64_t n = 1;
  for (auto x : shape) n *= x;
  return n;
}

TEST(Checkpoint, ChunkChecksumsAddUpAndVerifyOffline) {
  const std::string dir = scratch_dir();
  auto p = world_store(tiny_config());
  auto m = make_moments(p);
  EXPECT_EQ(error_of([&] {
              io::save_checkpoint(ckpt_of(dir), p, &m.state, make_meta(3), MPI_COMM_WORLD, small_chunks());
            }),
            "");
  on_rank0([&] {
    const auto info = io::inspect_checkpoint(dir);
    EXPECT_EQ(info.meta.chunk_elements, 7);
    std::int64_t chunks = 0;
    for (const auto& d : info.datasets) {
      const std::int64_t n = numel_of(d.shape);
      EXPECT_EQ(static_cast<std::int64_t>(d.chunk_checksums.size()), (n + 6) / 7) << d.path;
      std::uint64_t sum = 0;
      for (auto c : d.chunk_checksums) sum += c;
      EXPECT_EQ(sum, d.checksum) << d.path;
      chunks += (n + 6) / 7;
    }
    const auto r = io::verify_checkpoint(dir);
    EXPECT_TRUE(r.ok()) << io::format_verify_result(r);
    EXPECT_EQ(r.chunks_checked, chunks);
    EXPECT_TRUE(contains(io::format_verify_result(r), "OK: ")) << io::format_verify_result(r);
    const std::string table = io::format_checkpoint_info(info, true);
    EXPECT_TRUE(contains(table, "/optim/exp_avg_sq/layers.0.attn.wq.weight")) << table;
    EXPECT_TRUE(contains(table, "chunk_elements     7")) << table;
    EXPECT_TRUE(contains(table, "d_model = 8")) << table;
  });
  auto q = world_store(tiny_config());
  auto mq = make_moments(q, false);
  EXPECT_EQ(error_of([&] { io::load_checkpoint(dir, q, &mq.state, MPI_COMM_WORLD); }), "");
  expect_same_values(p, q);
  expect_same_moments(p, m, q, mq);
}

TEST(Checkpoint, FlippedByteNamesTheChunkOnLoadAndOffline) {
  const std::string dir = scratch_dir();
  auto p = world_store(tiny_config());
  EXPECT_EQ(error_of([&] {
              io::save_checkpoint(ckpt_of(dir), p, nullptr, make_meta(3), MPI_COMM_WORLD, small_chunks());
            }),
            "");
  const std::string victim = "/model/layers.0.attn.wq.weight";
  // Byte 2 of element 23: chunk 3, elements [21, 28).
  flip_dataset_byte((fs::path(ckpt_of(dir)) / "step_00000003" / "state.h5").string(), victim, 4 * 23 + 2);
  auto q = world_store(tiny_config());
  const std::string e = error_of([&] { io::load_checkpoint(dir, q, nullptr, MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(e, victim + " chunk 3 (elements [21, 28)) reads back with checksum")) << e;
  EXPECT_TRUE(contains(e, "nothing was loaded")) << e;
  on_rank0([&] {
    const auto r = io::verify_checkpoint(dir);
    ASSERT_EQ(r.mismatches.size(), 1u) << io::format_verify_result(r);
    EXPECT_EQ(r.mismatches[0].path, victim);
    EXPECT_EQ(r.mismatches[0].chunk, 3);
    EXPECT_EQ(r.mismatches[0].elements, (FlatRange{21, 28}));
    const std::string out = io::format_verify_result(r);
    EXPECT_TRUE(contains(out, "CORRUPT: ") && contains(out, victim) && contains(out, "state.h5")) << out;
  });
}

TEST(Checkpoint, FilesWithoutChunkChecksumsStillLoadAndVerify) {
  const std::string dir = scratch_dir();
  auto p = world_store(tiny_config());
  EXPECT_EQ(error_of([&] { io::save_checkpoint(ckpt_of(dir), p, nullptr, make_meta(2), MPI_COMM_WORLD); }), "");
  const std::string file = (fs::path(ckpt_of(dir)) / "step_00000002" / "state.h5").string();
  // What a checkpoint written before chunk checksums holds: none of their attributes.
  on_rank0([&] {
    const auto info = io::inspect_checkpoint(dir);
    hid_t f = H5Fopen(file.c_str(), H5F_ACC_RDWR, H5P_DEFAULT);
    ASSERT_GE(f, 0);
    EXPECT_GE(H5Adelete_by_name(f, "/", "chunk_elements", H5P_DEFAULT), 0);
    EXPECT_GE(H5Adelete_by_name(f, "/", "chunk_merkle_root", H5P_DEFAULT), 0);
    for (const auto& d : info.datasets) EXPECT_GE(H5Adelete_by_name(f, d.path.c_str(), "chunk_checksums", H5P_DEFAULT), 0);
    H5Fclose(f);
  });
  auto q = world_store(tiny_config());
  EXPECT_EQ(error_of([&] { io::load_checkpoint(dir, q, nullptr, MPI_COMM_WORLD); }), "");
  on_rank0([&] {
    const auto r = io::verify_checkpoint(dir);
    EXPECT_EQ(r.info.meta.chunk_elements, 0);
    EXPECT_TRUE(r.ok()) << io::format_verify_result(r);
    EXPECT_EQ(r.chunks_checked, static_cast<std::int64_t>(r.info.datasets.size()));
  });
  const std::string victim = "/model/norm.weight";
  flip_dataset_byte(file, victim, 5);
  const std::string e = error_of([&] { io::load_checkpoint(dir, q, nullptr, MPI_COMM_WORLD); });
  EXPECT_TRUE(contains(e, "dataset " + victim + " reads back with checksum")) << e;
  EXPECT_FALSE(contains(e, " chunk ")) << e;
}

}  // namespace
