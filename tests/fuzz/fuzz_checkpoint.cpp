// Fuzz target: the checkpoint reader (io/checkpoint/), on the bytes of a
// state.h5. Each input is written as <scratch>/step_00000001/state.h5 and
// read the way `examoe-ckpt verify` does (metadata, the dataset table,
// every chunk checksummed), then, when that reads, loaded the way a
// restart does into tensors of the shapes the file lists (one rank).
//
// Fuzz builds (EXAMOE_FUZZ) define FUZZING_BUILD_MODE_UNSAFE_FOR_PRODUCTION,
// which makes the reader take stored checksums on trust: a mutated file
// then gets past them to the code behind. The replay driver of the normal
// build checks them, so a regression input has to carry valid checksums.
#include <mpi.h>

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <filesystem>
#include <string>
#include <vector>

#include "core/log.hpp"
#include "core/types.hpp"
#include "fuzz_util.hpp"
#include "io/checkpoint/checkpoint.hpp"

namespace {

// The tensors a restart would pass for the /model datasets of `info`, or
// none when they would not fit in a fuzzing process.
bool restart_tensors(const exa::io::CheckpointInfo& info, std::vector<exa::io::CheckpointTensor>& tensors,
                     exa::io::OptimizerState& optim) {
  constexpr std::int64_t kMaxElements = std::int64_t(1) << 22;
  const std::string prefix = "/model/";
  std::int64_t total = 0;
  for (const auto& d : info.datasets) {
    if (d.path.compare(0, prefix.size(), prefix) != 0) continue;
    std::int64_t n = 1;
    for (const auto e : d.shape) {
      if (e < 0 || (e > 0 && n > kMaxElements / e)) return false;
      n *= e;
    }
    total += n;
    if (total > kMaxElements) return false;
    const std::string name = d.path.substr(prefix.size());
    exa::model::Shard whole{0, n, {}};
    tensors.push_back({name, d.shape, whole, exa::View1<float>("fuzz::value", static_cast<std::size_t>(n))});
    if (info.meta.has_optimizer) {
      optim[name] = {exa::View1<float>("fuzz::exp_avg", static_cast<std::size_t>(n)),
                     exa::View1<float>("fuzz::exp_avg_sq", static_cast<std::size_t>(n))};
    }
  }
  return true;
}

}  // namespace

extern "C" int LLVMFuzzerInitialize(int*, char***) {
  int provided = 0;
  MPI_Init_thread(nullptr, nullptr, MPI_THREAD_FUNNELED, &provided);
  Kokkos::initialize();
  exa::log::set_level(exa::log::Level::quiet);
  std::atexit([] {
    Kokkos::finalize();
    MPI_Finalize();
  });
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const std::uint8_t* data, std::size_t size) {
  const std::string step = exa::fuzz::scratch_dir() + "/step_00000001";
  std::filesystem::create_directories(step);
  exa::fuzz::write_file(step + "/" + exa::io::kCheckpointFile, data, size);

  exa::io::VerifyResult verified;
  if (!exa::fuzz::run_guarded("verify_checkpoint", [&] { verified = exa::io::verify_checkpoint(step); })) return 0;
  std::vector<exa::io::CheckpointTensor> tensors;
  exa::io::OptimizerState optim;
  if (!restart_tensors(verified.info, tensors, optim)) return 0;
  exa::fuzz::run_guarded("load_checkpoint", [&] {
    (void)exa::io::load_checkpoint(step, tensors, verified.info.meta.has_optimizer ? &optim : nullptr,
                                   MPI_COMM_SELF);
  });
  return 0;
}
