// Allreduce micro-benchmark in the style of the OSU / nccl-tests ones: for
// message sizes from --min-bytes to --max-bytes (×--step), the time, algorithm
// bandwidth and bus bandwidth of
//   MPI_Allreduce   plain MPI, in place, MPI_COMM_WORLD
//   Communicator    exa::comm::MpiCommunicator::allreduce (MPI_Iallreduce + wait)
//   hierarchical    exa::comm::hierarchical_allreduce over (node-local, inter-node)
// fp32 sums, host buffers.
//
//   mpiexec -n 4 build/bin/bench_collectives --max-bytes 4M --ranks-per-node 2
//
// Timing: each iteration starts after a barrier; its time is the slowest
// rank's. min and avg are over --iters iterations after --warmup ones.
// algbw = bytes / time; busbw = algbw × 2(n-1)/n (nccl-tests' allreduce bus
// factor: the bytes each link carries in a ring allreduce), n = world size.
// Before timing, every method's result is checked against MPI_Allreduce.
#include <mpi.h>

#include <CLI/CLI.hpp>
#include <algorithm>
#include <cmath>
#include <cstdint>
#include <cstdio>
#include <functional>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/hierarchical.hpp"
#include "comm/mpi_env.hpp"
#include "comm/process_grid.hpp"
#include "core/error.hpp"
#include "core/runtime.hpp"

namespace {

std::size_t parse_bytes(const std::string& s) {
  std::size_t pos = 0;
  const double v = std::stod(s, &pos);
  std::string unit = s.substr(pos);
  double mul = 1;
  if (unit == "K" || unit == "k" || unit == "KB" || unit == "KiB") mul = 1024;
  else if (unit == "M" || unit == "MB" || unit == "MiB") mul = 1024.0 * 1024;
  else if (unit == "G" || unit == "GB" || unit == "GiB") mul = 1024.0 * 1024 * 1024;
  else if (!unit.empty()) throw exa::Error("bench_collectives: unknown size unit in '" + s + "' (use K, M or G)");
  return static_cast<std::size_t>(v * mul);
}

std::string human(std::size_t b) {
  char buf[32];
  if (b >= (1u << 20)) std::snprintf(buf, sizeof buf, "%zuM", b >> 20);
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%zuK", b >> 10);
  else std::snprintf(buf, sizeof buf, "%zu", b);
  return buf;
}

struct Stats {
  double min_s = 0, avg_s = 0;
};

Stats time_op(const std::function<void()>& op, int warmup, int iters) {
  for (int i = 0; i < warmup; ++i) op();
  double sum = 0, mn = 1e300;
  for (int i = 0; i < iters; ++i) {
    MPI_Barrier(MPI_COMM_WORLD);
    const double t0 = MPI_Wtime();
    op();
    double t = MPI_Wtime() - t0;
    MPI_Allreduce(MPI_IN_PLACE, &t, 1, MPI_DOUBLE, MPI_MAX, MPI_COMM_WORLD);
    sum += t;
    mn = std::min(mn, t);
  }
  return {mn, sum / std::max(iters, 1)};
}

}  // namespace

int main(int argc, char** argv) {
  exa::MpiEnvironment mpi(argc, argv);
  int rc = 0;
  try {
    CLI::App app{"Allreduce bandwidth: MPI_Allreduce vs exa::comm (flat and hierarchical)"};
    std::string min_b = "4K", max_b = "256M";
    int step = 4, iters = 20, warmup = 5, rpn = 0;
    app.add_option("--min-bytes", min_b, "smallest message (K/M/G suffixes)")->capture_default_str();
    app.add_option("--max-bytes", max_b, "largest message; cap it on small machines")->capture_default_str();
    app.add_option("--step", step, "size factor between rows (2 or 4)")->capture_default_str();
    app.add_option("--iters", iters, "timed iterations per size")->capture_default_str();
    app.add_option("--warmup", warmup, "untimed iterations per size")->capture_default_str();
    app.add_option("--ranks-per-node", rpn, "pretend nodes of this many consecutive ranks; 0 = detect")
        ->capture_default_str();
    try {
      app.parse(argc, argv);
    } catch (const CLI::ParseError& e) {
      return mpi.rank() == 0 ? app.exit(e) : (e.get_exit_code());
    }
    EXA_REQUIRE(step >= 2, "--step {} must be at least 2", step);
    const std::size_t lo = std::max<std::size_t>(parse_bytes(min_b), 4), hi = parse_bytes(max_b);

    exa::KokkosRuntime kokkos(argc, argv);
    {
      exa::comm::GridSizes s;
      s.ranks_per_node = rpn;
      exa::comm::ProcessGrid grid(s);
      auto comm = exa::comm::make_mpi_communicator(MPI_COMM_WORLD);
      auto hc = exa::comm::make_hierarchical(grid, exa::comm::Group::World);
      const int n = grid.sizes().world, r = mpi.rank();
      const double bus = n > 1 ? 2.0 * (n - 1) / n : 1.0;
      if (r == 0) {
        std::printf("# bench_collectives: %s\n# %s\n", grid.describe().c_str(), exa::mpi_library_version().c_str());
        std::printf("# float32 sum, %d iterations after %d warm-up; time = slowest rank; busbw = algbw * 2(n-1)/n\n",
                    iters, warmup);
        std::printf("%10s  %-14s %10s %10s %12s %12s\n", "bytes", "method", "min_us", "avg_us", "algbw_GB/s",
                    "busbw_GB/s");
      }
      const std::size_t max_count = hi / sizeof(float);
      std::vector<float> buf(std::max<std::size_t>(max_count, 1)), ref(buf.size());
      auto view = Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(buf.data(),
                                                                                                    buf.size());
      for (std::size_t bytes = lo; bytes <= hi; bytes *= static_cast<std::size_t>(step)) {
        const std::size_t count = bytes / sizeof(float);
        auto sub = Kokkos::subview(view, std::make_pair(std::size_t(0), count));
        auto fill = [&] {
          for (std::size_t i = 0; i < count; ++i) buf[i] = static_cast<float>((i * 31 + r * 7) % 64);
        };
        // Correctness first (small integers: every order sums exactly).
        fill();
        MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
        std::copy(buf.begin(), buf.begin() + count, ref.begin());
        int bad = 0;
        fill();
        comm->allreduce(buf.data(), buf.data(), count);
        bad += !std::equal(buf.begin(), buf.begin() + count, ref.begin());
        fill();
        exa::comm::hierarchical_allreduce(hc, sub);
        bad += !std::equal(buf.begin(), buf.begin() + count, ref.begin());
        MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
        EXA_REQUIRE(bad == 0, "bench_collectives: results differ from MPI_Allreduce at {} bytes", bytes);

        // Timed (the buffer's values grow; float sums of them stay finite for these iteration counts).
        const std::pair<const char*, std::function<void()>> methods[] = {
            {"MPI_Allreduce",
             [&] {
               MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
             }},
            {"Communicator", [&] { comm->allreduce(buf.data(), buf.data(), count); }},
            {"hierarchical", [&] { exa::comm::hierarchical_allreduce(hc, sub); }},
        };
        for (const auto& [name, op] : methods) {
          fill();
          const Stats st = time_op(op, warmup, iters);
          if (r == 0) {
            const double alg = static_cast<double>(bytes) / st.avg_s / 1e9;
            std::printf("%10s  %-14s %10.1f %10.1f %12.3f %12.3f\n", human(bytes).c_str(), name, st.min_s * 1e6,
                        st.avg_s * 1e6, alg, alg * bus);
          }
        }
        if (bytes > hi / static_cast<std::size_t>(step)) break;
      }
    }
  } catch (const std::exception& e) {
    if (mpi.rank() == 0) std::fprintf(stderr, "bench_collectives: %s\n", e.what());
    rc = 1;
  }
  return rc;
}
