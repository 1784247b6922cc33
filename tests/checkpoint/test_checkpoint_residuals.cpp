// Top-k's error-feedback residuals in checkpoints (io/checkpoint.hpp,
// OptimizerMoments::residual), run by ctest at 1, 2 and 4 ranks:
//   - the file keeps a row per rank holding the same box, of shape
//     [holders, ...shape], and a load in the same layout gives every rank
//     its own row back bit for bit;
//   - a load in another layout folds the rows: holder j of a box gets the
//     sum of rows k = j, j + holders, ... over its box;
//   - a file without rows loads zeros; a run without residuals ignores them;
//   - verify checks the rows like every other dataset.
// Every test is collective.
#include <gtest/gtest.h>

#include <Kokkos_Core.hpp>
#include <filesystem>
#include <string>
#include <vector>

#include "harness/host_views.hpp"
#include "io/checkpoint/checkpoint.hpp"
#include "model/shard.hpp"
#include "mpi_checkpoint_util.hpp"

namespace fs = std::filesystem;
using namespace exa;
using exa::test::to_device;
using exa::test::to_host;
using exa::test::world_rank;
using exa::test::world_size;

namespace {

const std::vector<std::int64_t> kShape{8, 4};

// Every rank holds the whole tensor "w" (replicas, as data parallelism
// has them); its residual is 100 * rank + element.
std::vector<float> residual_of(int rank, const model::Box& box) {
  std::vector<float> r;
  for (std::int64_t i = box.offset[0]; i < box.offset[0] + box.extent[0]; ++i)
    for (std::int64_t j = box.offset[1]; j < box.offset[1] + box.extent[1]; ++j)
      r.push_back(float(100 * rank + i * kShape[1] + j));
  return r;
}

struct Holder {
  std::vector<io::CheckpointTensor> tensors;
  io::OptimizerState optim;
};

// "w" held over `box` by this rank (value and moments, as tensor
// parallelism holds a part), and its residual of that box (has_residual
// false: none).
Holder run_with(const model::Box& box, std::vector<float> residual, bool has_residual = true) {
  Holder r;
  const std::int64_t n = box.numel();
  std::vector<float> w(std::size_t(n), 0.5f);
  r.tensors.push_back(io::CheckpointTensor{"w", kShape, model::Shard{0, n, box}, to_device(w)});
  io::OptimizerMoments m{to_device(w), to_device(w), has_residual, to_device(residual)};
  r.optim["w"] = m;
  return r;
}

std::string scratch() { return (fs::path(test::scratch_dir("examoe-ckpt-residuals-test")) / "ckpt").string(); }

io::CheckpointMeta meta() {
  io::CheckpointMeta m;
  m.step = 3;
  m.layout.world_size = world_size();
  return m;
}

}  // namespace

TEST(CheckpointResiduals, SameLayoutGivesEachRankItsOwnRow) {
  const std::string dir = scratch();
  const auto box = model::whole_box(kShape);
  const Holder saved = run_with(box, residual_of(world_rank(), box));
  const std::string step = io::save_checkpoint(dir, saved.tensors, &saved.optim, meta(), MPI_COMM_WORLD);
  const auto info = io::inspect_checkpoint(step);
  bool found = false;
  for (const auto& d : info.datasets)
    if (d.path == "/optim/topk_residual/w") {
      found = true;
      EXPECT_EQ(d.shape, (std::vector<std::int64_t>{world_size(), 8, 4}));
    }
  EXPECT_TRUE(found);
  if (world_rank() == 0) EXPECT_TRUE(io::verify_checkpoint(step).ok());

  Holder loaded = run_with(box, std::vector<float>(32, -1.0f));
  io::load_checkpoint(dir, loaded.tensors, &loaded.optim, MPI_COMM_WORLD);
  EXPECT_EQ(to_host(loaded.optim["w"].residual), residual_of(world_rank(), box));
}

TEST(CheckpointResiduals, AnotherLayoutFoldsTheRows) {
  const std::string dir = scratch();
  const auto whole = model::whole_box(kShape);
  const Holder saved = run_with(whole, residual_of(world_rank(), whole));
  io::save_checkpoint(dir, saved.tensors, &saved.optim, meta(), MPI_COMM_WORLD);

  // The new layout splits dim 0 in two (one part at one rank): rank r holds
  // half r % 2, as holder j = r / 2 of P / 2 holders of it.
  const int P = world_size(), parts = P >= 2 ? 2 : 1, holders = P / parts;
  const int half = world_rank() % parts, j = world_rank() / parts;
  model::Box box{{half * kShape[0] / parts, 0}, {kShape[0] / parts, kShape[1]}};
  Holder loaded = run_with(box, std::vector<float>(std::size_t(box.numel()), -1.0f));
  io::load_checkpoint(dir, loaded.tensors, &loaded.optim, MPI_COMM_WORLD);
  std::vector<float> want(std::size_t(box.numel()), 0.0f);
  for (int k = j; k < P; k += holders) {
    const auto row = residual_of(k, box);
    for (std::size_t e = 0; e < want.size(); ++e) want[e] += row[e];
  }
  EXPECT_EQ(to_host(loaded.optim["w"].residual), want);
}

TEST(CheckpointResiduals, AFileWithoutRowsLoadsZerosAndARunWithoutResidualsIgnoresThem) {
  const std::string dir = scratch();
  const auto box = model::whole_box(kShape);
  const Holder plain = run_with(box, {}, false);
  io::save_checkpoint(dir, plain.tensors, &plain.optim, meta(), MPI_COMM_WORLD);
  Holder loaded = run_with(box, std::vector<float>(32, 7.0f));
  io::load_checkpoint(dir, loaded.tensors, &loaded.optim, MPI_COMM_WORLD);
  EXPECT_EQ(to_host(loaded.optim["w"].residual), std::vector<float>(32, 0.0f));

  const std::string dir2 = dir + "-rows";
  const Holder saved = run_with(box, residual_of(world_rank(), box));
  io::save_checkpoint(dir2, saved.tensors, &saved.optim, meta(), MPI_COMM_WORLD);
  Holder without = run_with(box, {}, false);
  EXPECT_NO_THROW(io::load_checkpoint(dir2, without.tensors, &without.optim, MPI_COMM_WORLD));
}
