// Collective micro-benchmark in the style of the OSU / nccl-tests ones: for
// message sizes from --min-bytes to --max-bytes (×--step), the time, algorithm
// bandwidth and bus bandwidth of
//   allreduce (--op allreduce), fp32 sums in place:
//     MPI_Allreduce   plain MPI, MPI_COMM_WORLD
//     Communicator    exa::comm::MpiCommunicator::allreduce (MPI_Iallreduce + wait)
//     hierarchical    exa::comm::hierarchical_allreduce over (node-local, inter-node)
//   all-to-all-v (--op alltoallv), fp32, uniform counts: bytes is what each
//   rank sends in all (bytes / n to every rank, itself included):
//     MPI_Alltoallv   plain MPI, MPI_COMM_WORLD
//     Communicator    exa::comm::MpiCommunicator::alltoallv (MPI_Ialltoallv + wait)
//     hierarchical    exa::comm::hierarchical_alltoallv (node-local, then inter-node)
// host buffers.
//
//   mpiexec -n 4 build/bin/bench_collectives --max-bytes 4M --ranks-per-node 2 [--op alltoallv]
//
// Timing: each iteration starts after a barrier; its time is the slowest
// rank's. min and avg are over --iters iterations after --warmup ones.
// algbw = bytes / time; busbw = algbw × 2(n-1)/n for allreduce and
// algbw × (n-1)/n for all-to-all (nccl-tests' bus factors: the bytes each
// link carries), n = world size. Before timing, every method's result is
// checked against the plain MPI call.
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
#include "comm/hierarchical_alltoallv.hpp"
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

using Method = std::pair<const char*, std::function<void()>>;

struct Bench {
  exa::comm::Communicator& comm;
  exa::comm::HierarchicalComms& hc;
  int n = 1, rank = 0, warmup = 0, iters = 1;

  // Times each method (after `fill`) and prints a row for it.
  void run(std::size_t bytes, double bus, const std::function<void()>& fill, const std::vector<Method>& methods) {
    for (const auto& [name, op] : methods) {
      fill();
      const Stats st = time_op(op, warmup, iters);
      if (rank == 0) {
        const double alg = static_cast<double>(bytes) / st.avg_s / 1e9;
        std::printf("%10s  %-14s %10.1f %10.1f %12.3f %12.3f\n", human(bytes).c_str(), name, st.min_s * 1e6,
                    st.avg_s * 1e6, alg, alg * bus);
      }
    }
  }

  void allreduce(std::size_t bytes, std::vector<float>& buf, std::vector<float>& ref) {
    const std::size_t count = bytes / sizeof(float);
    auto sub = Kokkos::View<float*, Kokkos::HostSpace, Kokkos::MemoryTraits<Kokkos::Unmanaged>>(buf.data(), count);
    auto fill = [&] {
      for (std::size_t i = 0; i < count; ++i) buf[i] = static_cast<float>((i * 31 + rank * 7) % 64);
    };
    // Correctness first (small integers: every order sums exactly).
    fill();
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), static_cast<int>(count), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD);
    std::copy(buf.begin(), buf.begin() + count, ref.begin());
    int bad = 0;
    fill();
    comm.allreduce(buf.data(), buf.data(), count);
    bad += !std::equal(buf.begin(), buf.begin() + count, ref.begin());
    fill();
    exa::comm::hierarchical_allreduce(hc, sub);
    bad += !std::equal(buf.begin(), buf.begin() + count, ref.begin());
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    EXA_REQUIRE(bad == 0, "bench_collectives: allreduce results differ from MPI_Allreduce at {} bytes", bytes);

    // Timed (the buffer's values grow; float sums of them stay finite for these iteration counts).
    const int c = static_cast<int>(count);
    run(bytes, n > 1 ? 2.0 * (n - 1) / n : 1.0, fill,
        {{"MPI_Allreduce", [&] { MPI_Allreduce(MPI_IN_PLACE, buf.data(), c, MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD); }},
         {"Communicator", [&] { comm.allreduce(buf.data(), buf.data(), count); }},
         {"hierarchical", [&] { exa::comm::hierarchical_allreduce(hc, sub); }}});
  }

  // `send` and `recv` hold at least bytes / sizeof(float) elements.
  void alltoallv(std::size_t bytes, std::vector<float>& send, std::vector<float>& recv, std::vector<float>& ref) {
    const int per = static_cast<int>(bytes / sizeof(float) / static_cast<std::size_t>(n));
    const std::size_t count = static_cast<std::size_t>(per) * static_cast<std::size_t>(n);
    std::vector<int> counts(static_cast<std::size_t>(n), per), displs(static_cast<std::size_t>(n));
    for (int q = 0; q < n; ++q) displs[q] = q * per;
    for (std::size_t i = 0; i < count; ++i) send[i] = static_cast<float>((i * 31 + rank * 7) % 4096);
    MPI_Alltoallv(send.data(), counts.data(), displs.data(), MPI_FLOAT, ref.data(), counts.data(), displs.data(),
                  MPI_FLOAT, MPI_COMM_WORLD);
    auto ours = [&] {
      comm.alltoallv(send.data(), counts, displs, recv.data(), counts, displs, exa::comm::DType::F32);
    };
    auto hier = [&] {
      exa::comm::hierarchical_alltoallv(hc, send.data(), counts, displs, recv.data(), counts, displs,
                                        exa::comm::DType::F32);
    };
    int bad = 0;
    for (const auto& f : {std::function<void()>(ours), std::function<void()>(hier)}) {
      std::fill(recv.begin(), recv.begin() + count, -1.0f);
      f();
      bad += !std::equal(recv.begin(), recv.begin() + count, ref.begin());
    }
    MPI_Allreduce(MPI_IN_PLACE, &bad, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
    EXA_REQUIRE(bad == 0, "bench_collectives: all-to-all-v results differ from MPI_Alltoallv at {} bytes", bytes);

    run(count * sizeof(float), n > 1 ? double(n - 1) / n : 1.0, [] {},
        {{"MPI_Alltoallv",
          [&] {
            MPI_Alltoallv(send.data(), counts.data(), displs.data(), MPI_FLOAT, recv.data(), counts.data(),
                          displs.data(), MPI_FLOAT, MPI_COMM_WORLD);
          }},
         {"Communicator", ours},
         {"hierarchical", hier}});
  }
};

}  // namespace

int main(int argc, char** argv) {
  exa::MpiEnvironment mpi(argc, argv);
  int rc = 0;
  try {
    CLI::App app{"Allreduce and all-to-all-v bandwidth: plain MPI vs exa::comm (flat and hierarchical)"};
    std::string min_b = "4K", max_b = "256M";
    std::string which = "all";
    int step = 4, iters = 20, warmup = 5, rpn = 0;
    app.add_option("--min-bytes", min_b, "smallest message (K/M/G suffixes)")->capture_default_str();
    app.add_option("--max-bytes", max_b, "largest message; cap it on small machines")->capture_default_str();
    app.add_option("--step", step, "size factor between rows (2 or 4)")->capture_default_str();
    app.add_option("--iters", iters, "timed iterations per size")->capture_default_str();
    app.add_option("--warmup", warmup, "untimed iterations per size")->capture_default_str();
    app.add_option("--op", which, "collective: allreduce, alltoallv or all")
        ->check(CLI::IsMember({"allreduce", "alltoallv", "all"}))
        ->capture_default_str();
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
      Bench bench{*comm, hc, grid.sizes().world, mpi.rank(), warmup, iters};
      if (bench.rank == 0) {
        std::printf("# bench_collectives: %s\n# %s\n", grid.describe().c_str(), exa::mpi_library_version().c_str());
        std::printf("# float32, %d iterations after %d warm-up; time = slowest rank\n", iters, warmup);
      }
      const std::size_t max_count = std::max<std::size_t>(hi / sizeof(float), 1);
      std::vector<float> a(max_count), b(max_count), ref(max_count);
      for (const char* op : {"allreduce", "alltoallv"}) {
        if (which != "all" && which != op) continue;
        if (bench.rank == 0) {
          const bool ar = std::string(op) == "allreduce";
          std::printf("# %s: %s; busbw = algbw * %s\n", op,
                      ar ? "sum in place" : "uniform counts, bytes = what each rank sends in all",
                      ar ? "2(n-1)/n" : "(n-1)/n");
          std::printf("%10s  %-14s %10s %10s %12s %12s\n", "bytes", "method", "min_us", "avg_us", "algbw_GB/s",
                      "busbw_GB/s");
        }
        for (std::size_t bytes = lo; bytes <= hi; bytes *= static_cast<std::size_t>(step)) {
          if (std::string(op) == "allreduce") {
            bench.allreduce(bytes, a, ref);
          } else {
            bench.alltoallv(bytes, a, b, ref);
          }
          if (bytes > hi / static_cast<std::size_t>(step)) break;
        }
      }
    }
  } catch (const std::exception& e) {
    if (mpi.rank() == 0) std::fprintf(stderr, "bench_collectives: %s\n", e.what());
    rc = 1;
  }
  return rc;
}
