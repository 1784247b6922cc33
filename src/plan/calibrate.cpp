#include "plan/calibrate.hpp"

#include <unistd.h>

#include <algorithm>
#include <tuple>
#include <utility>
#include <cstdio>
#include <fmt/format.h>
#include <vector>

#include "core/error.hpp"
#include "core/types.hpp"
#include "kernels/gemm.hpp"
#include "kernels/onednn_matmul.hpp"
#include "train/sgemm_peak.hpp"

namespace exa::plan {

namespace {

double now() { return MPI_Wtime(); }

// The best time of `f` over repeats for about `seconds` (three at least),
// after one call to warm up. Every rank of `comm` loops the same count
// and the slowest rank's best stands; MPI_COMM_SELF times one rank alone.
template <class F>
double best_seconds(MPI_Comm comm, double seconds, F&& f) {
  f();
  int reps = 0;
  double best = 1e30, stop = now() + seconds;
  MPI_Bcast(&stop, 1, MPI_DOUBLE, 0, comm);
  for (;;) {
    MPI_Barrier(comm);
    const double t0 = now();
    f();
    best = std::min(best, now() - t0);
    int go = (now() < stop || ++reps < 3) ? 1 : 0;
    MPI_Bcast(&go, 1, MPI_INT, 0, comm);
    if (!go) break;
  }
  MPI_Allreduce(MPI_IN_PLACE, &best, 1, MPI_DOUBLE, MPI_MAX, comm);
  return best;
}

double bf16_tflops(double seconds) {
  if (!kernels::onednn_available()) return 0;
  // oneDNN's threads as a run's: left at its default, every rank of a node
  // would start a thread per core.
  kernels::onednn_match_blas_threads();
  const int n = 1024;
  std::vector<float> a(std::size_t(n) * n, 0.5f), b(std::size_t(n) * n, 0.25f), c(std::size_t(n) * n);
  const double t = best_seconds(MPI_COMM_SELF, seconds, [&] {
    kernels::onednn_gemm(kernels::MatmulPrecision::bf16, false, true, n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f,
                         c.data(), n);
  });
  return 2.0 * n * double(n) * n / t * 1e-12;
}

// The gemm rate at M rows (K = N = 1024, as the model's products C = A B^T)
// for M = 32 ... 2048, fitted as 1/rate = a + b/M: a product of M rows
// reaches M / (M + b/a) of the large products' rate.
double gemm_half_rows(double seconds) {
  const int K = 1024, N = 1024;
  View2<float> b("exa::plan::gemm_b", N, K);
  Kokkos::deep_copy(b, 0.25f);
  double sx = 0, sy = 0, sxx = 0, sxy = 0;
  int n = 0;
  for (int M : {32, 128, 512, 2048}) {
    View2<float> a("exa::plan::gemm_a", M, K), c("exa::plan::gemm_c", M, N);
    Kokkos::deep_copy(a, 0.5f);
    const double t = best_seconds(MPI_COMM_SELF, seconds / 4, [&] {
      kernels::gemm('N', 'T', 1.0f, a, b, 0.0f, c);
      Kokkos::fence();
    });
    const double x = 1.0 / M, y = t / (2.0 * M * N * K);  // seconds per FLOP
    sx += x, sy += y, sxx += x * x, sxy += x * y, ++n;
  }
  const double slope = (n * sxy - sx * sy) / (n * sxx - sx * sx), icept = (sy - slope * sx) / n;
  // Noise (ranks sharing cores) can make the fit meaningless: no
  // fall-off then, and never more than a large product's rows.
  return icept > 0 && slope > 0 ? std::min(slope / icept, 65536.0) : 0.0;
}

// Streaming copy of 64 MiB: read and write.
double memory_gbs(double seconds) {
  const std::size_t n = std::size_t(16) << 20;
  View1<float> a("exa::plan::bw_a", n), b("exa::plan::bw_b", n);
  const double t = best_seconds(MPI_COMM_SELF, seconds, [&] {
    Kokkos::deep_copy(b, a);
    Kokkos::fence();
  });
  return 2.0 * double(n) * 4 / t * 1e-9;
}

// The time of a large message less a small one's (its latency). A
// descheduled rank can make the small one slower than it is (ranks
// sharing cores): then the large one's whole time stands, a lower bound
// on the bandwidth rather than an absurd one.
double transfer_seconds(double big, double small) { return big - small > 0.5 * big ? big - small : big; }

// Each rank's sends per second in an allreduce (ring: 2 (p-1)/p n) and an
// all-to-all ((p-1)/p n) of 16 MiB, less the 8-float time (the latency).
std::pair<double, double> collective_gbs(MPI_Comm comm, int size, double seconds) {
  const std::size_t big = std::size_t(4) << 20, small = 8 * std::size_t(size);
  std::vector<float> in(big, 1.0f), out(big);
  auto allreduce = [&](std::size_t n) {
    return best_seconds(comm, seconds / 4, [&] {
      MPI_Allreduce(in.data(), out.data(), int(n), MPI_FLOAT, MPI_SUM, comm);
    });
  };
  auto alltoall = [&](std::size_t n) {
    return best_seconds(comm, seconds / 4, [&] {
      MPI_Alltoall(in.data(), int(n / std::size_t(size)), MPI_FLOAT, out.data(), int(n / std::size_t(size)),
                   MPI_FLOAT, comm);
    });
  };
  const double p = size, bytes = 4.0 * double(big);
  const double ar = 2 * (p - 1) / p * bytes / transfer_seconds(allreduce(big), allreduce(small));
  const double a2a = (p - 1) / p * bytes / transfer_seconds(alltoall(big), alltoall(small));
  return {ar * 1e-9, a2a * 1e-9};
}

// The best time of an allreduce of `buf` in place.
double inplace_allreduce_seconds(MPI_Comm comm, std::vector<float>& buf, double seconds) {
  return best_seconds(comm, seconds, [&] {
    MPI_Allreduce(MPI_IN_PLACE, buf.data(), int(buf.size()), MPI_FLOAT, MPI_SUM, comm);
  });
}

// The allreduce rate on 256 MiB in place, a buffer no cache holds (as a
// model's gradient): the reduction then streams through memory.
double large_allreduce_gbs(MPI_Comm comm, int size, double seconds) {
  std::vector<float> buf(std::size_t(64) << 20, 1.0f);
  const double t = inplace_allreduce_seconds(comm, buf, seconds / 2);
  const double p = size;
  return 2 * (p - 1) / p * 4.0 * double(buf.size()) / t * 1e-9;
}

// How much of a nonblocking allreduce (64 MiB, in place) passes while
// the ranks compute without calling MPI, as they do between the
// engine's polls: post it, compute for twice its blocking time, then
// wait. The share of the blocking time the wait saved, best of three.
double overlap_share(MPI_Comm comm, double seconds) {
  std::vector<float> buf(std::size_t(16) << 20, 1.0f);
  const double blocking = inplace_allreduce_seconds(comm, buf, seconds / 4);
  double waited = blocking;
  for (int rep = 0; rep < 3; ++rep) {
    MPI_Barrier(comm);
    MPI_Request req;
    MPI_Iallreduce(MPI_IN_PLACE, buf.data(), int(buf.size()), MPI_FLOAT, MPI_SUM, comm, &req);
    // Register-only work: the collective keeps the memory bandwidth.
    volatile double sink = 0;
    double x = 1;
    for (const double stop = now() + 2 * blocking; now() < stop;)
      for (int i = 0; i < 4096; ++i) x = x * 0.999999 + 1e-9;
    sink = x;
    (void)sink;
    const double t0 = now();
    MPI_Wait(&req, MPI_STATUS_IGNORE);
    waited = std::min(waited, now() - t0);
  }
  MPI_Allreduce(MPI_IN_PLACE, &waited, 1, MPI_DOUBLE, MPI_MAX, comm);
  if (!(blocking > 0)) return 1;  // below the timer's resolution: nothing to hide
  return std::clamp(1 - waited / blocking, 0.0, 1.0);
}

// Ranks a and b exchange `bytes`; half the round trip (every rank of
// `comm` takes part in the loop's barriers).
double p2p_seconds(MPI_Comm comm, int rank, int a, int b, std::size_t bytes, double seconds) {
  std::vector<char> buf(std::max<std::size_t>(bytes, 1));
  return best_seconds(comm, seconds, [&] {
    if (rank == a) {
      MPI_Send(buf.data(), int(bytes), MPI_BYTE, b, 7, comm);
      MPI_Recv(buf.data(), int(bytes), MPI_BYTE, b, 7, comm, MPI_STATUS_IGNORE);
    } else if (rank == b) {
      MPI_Recv(buf.data(), int(bytes), MPI_BYTE, a, 7, comm, MPI_STATUS_IGNORE);
      MPI_Send(buf.data(), int(bytes), MPI_BYTE, a, 7, comm);
    }
  }) / 2;
}

// The link between ranks a and b: latency (8 B) and bandwidth (8 MiB).
Link p2p_link(MPI_Comm comm, int rank, int a, int b, double seconds) {
  const double small = p2p_seconds(comm, rank, a, b, 8, seconds / 2);
  const double big = p2p_seconds(comm, rank, a, b, std::size_t(8) << 20, seconds / 2);
  return {double(std::size_t(8) << 20) / transfer_seconds(big, small) * 1e-9, small * 1e6};
}

double write_gbs(const std::string& dir) {
  const std::string path = fmt::format("{}/.examoe-plan-calibrate-{}", dir, ::getpid());
  const std::size_t n = std::size_t(64) << 20;
  std::vector<char> buf(n, 'x');
  const double t0 = now();
  FILE* f = std::fopen(path.c_str(), "wb");
  EXA_REQUIRE(f != nullptr, "calibrate: cannot write {} (pass --scratch DIR, a directory you can write)", path);
  const bool ok = std::fwrite(buf.data(), 1, n, f) == n && std::fflush(f) == 0 && ::fsync(::fileno(f)) == 0;
  std::fclose(f);
  std::remove(path.c_str());
  EXA_REQUIRE(ok, "calibrate: writing {} failed (disk full?)", path);
  return double(n) / (now() - t0) * 1e-9;
}

}  // namespace

Cluster calibrate(const CalibrateOptions& opt, MPI_Comm comm) {
  int rank = 0, size = 1;
  MPI_Comm_rank(comm, &rank);
  MPI_Comm_size(comm, &size);
  Cluster c;
  c.name = "calibrated";
  c.source = "examoe-plan calibrate";
  c.topology.kind = "flat";
  // Nodes: the ranks sharing memory (or pretend nodes of ranks_per_node
  // consecutive ranks), the same on every node.
  int rpn = opt.ranks_per_node;
  MPI_Comm local = MPI_COMM_NULL;
  if (rpn > 0) {
    EXA_REQUIRE(size % rpn == 0, "calibrate: {} ranks per node do not divide the {} ranks", rpn, size);
    MPI_Comm_split(comm, rank / rpn, rank, &local);
  } else {
    MPI_Comm_split_type(comm, MPI_COMM_TYPE_SHARED, rank, MPI_INFO_NULL, &local);
    MPI_Comm_size(local, &rpn);
    MPI_Allreduce(MPI_IN_PLACE, &rpn, 1, MPI_INT, MPI_MIN, comm);
  }
  const int nodes = size / rpn;
  c.nodes = opt.nodes > 0 ? opt.nodes : nodes;
  c.devices_per_node = opt.devices_per_node > 0 ? opt.devices_per_node : rpn;
  // Every rank measures at once, as a run's ranks compute at once.
  MPI_Barrier(comm);
  c.fp32_tflops = train::measure_sgemm_gflops(1024, opt.seconds) * 1e-3;
  c.bf16_tflops = bf16_tflops(opt.seconds);
  c.fp16_tflops = c.bf16_tflops;
  c.memory_bandwidth_gbs = memory_gbs(opt.seconds);
  c.gemm_half_rows = gemm_half_rows(opt.seconds);
  // The slowest rank sets the pace.
  for (double* v : {&c.fp32_tflops, &c.bf16_tflops, &c.memory_bandwidth_gbs})
    MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_DOUBLE, MPI_MIN, comm);
  MPI_Allreduce(MPI_IN_PLACE, &c.gemm_half_rows, 1, MPI_DOUBLE, MPI_MAX, comm);
  c.fp16_tflops = c.bf16_tflops;
  const long pages = ::sysconf(_SC_PHYS_PAGES), page = ::sysconf(_SC_PAGE_SIZE);
  c.memory_gib = double(pages) * double(page) / 1073741824.0 / double(c.devices_per_node);
  // Inside a node: ranks 0 and 1 and the node-local collectives (every
  // node at once); between nodes: rank 0 and the first rank of the next
  // node, and the collectives over every rank.
  if (rpn >= 2) {
    c.intra = p2p_link(comm, rank, 0, 1, opt.seconds);
    std::tie(c.intra.allreduce_gbs, c.intra.alltoall_gbs) = collective_gbs(local, rpn, opt.seconds);
    c.intra.allreduce_large_gbs = large_allreduce_gbs(local, rpn, opt.seconds);
    c.intra.overlap = overlap_share(local, opt.seconds);
    for (double* v : {&c.intra.allreduce_gbs, &c.intra.alltoall_gbs, &c.intra.allreduce_large_gbs, &c.intra.overlap})
      MPI_Allreduce(MPI_IN_PLACE, v, 1, MPI_DOUBLE, MPI_MIN, comm);
  } else {
    c.intra = {c.memory_bandwidth_gbs / 2, 1.0};
  }
  if (nodes >= 2) {
    c.inter = p2p_link(comm, rank, 0, rpn, opt.seconds);
    std::tie(c.inter.allreduce_gbs, c.inter.alltoall_gbs) = collective_gbs(comm, size, opt.seconds);
    c.inter.allreduce_large_gbs = large_allreduce_gbs(comm, size, opt.seconds);
    c.inter.overlap = overlap_share(comm, opt.seconds);
  } else {
    c.inter = c.intra;
  }
  MPI_Comm_free(&local);
  c.storage_write_gbs = rank == 0 ? write_gbs(opt.scratch_dir) : 0;
  MPI_Bcast(&c.storage_write_gbs, 1, MPI_DOUBLE, 0, comm);
  return c;
}

}  // namespace exa::plan
