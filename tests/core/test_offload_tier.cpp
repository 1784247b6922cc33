// The offload tier (core/offload_tier.hpp): values survive leaving the
// resident set, pagemap sees pages come and go, only the offloaded spans
// are file-backed, and a bad directory is refused by name.
#include <gtest/gtest.h>
#include <unistd.h>

#include <Kokkos_Core.hpp>
#include <cstdio>
#include <filesystem>
#include <memory>
#include <string>

#include "core/error.hpp"
#include "core/memory_ledger.hpp"
#include "core/offload_tier.hpp"

namespace fs = std::filesystem;
using exa::ElementSpan;
using exa::OffloadFile;
using exa::TieredBuffer;

namespace {

fs::path scratch_dir(const char* name) {
  const fs::path d = fs::temp_directory_path() / (std::string("examoe_tier_") + name + "_" + std::to_string(getpid()));
  fs::remove_all(d);
  fs::create_directories(d);
  return d;
}

const std::int64_t kPage = sysconf(_SC_PAGESIZE);

}  // namespace

// Host builds: the file-backed tier.
#if !defined(KOKKOS_ENABLE_CUDA)

TEST(OffloadTier, ValuesSurviveReleaseAndResidencyIsMeasured) {
  const auto dir = scratch_dir("values");
  auto file = std::make_shared<OffloadFile>(dir.string(), 0);
  // Three pages of floats before the span, eight in it, two after.
  const std::int64_t per = kPage / 4, n = 13 * per;
  const ElementSpan span{3 * per, 11 * per};
  TieredBuffer b("exa::params", n, {span}, file);
  EXPECT_EQ(b.offloaded_bytes(), 8 * kPage);
  EXPECT_EQ(file->bytes(), 8 * kPage);
  // Nothing resident before the first write; the file holds zeros.
  EXPECT_EQ(b.resident_bytes(), 0);
  for (std::int64_t i = 0; i < n; ++i) EXPECT_EQ(b.data()[i], 0.0f) << i;
  for (std::int64_t i = 0; i < n; ++i) b.data()[i] = float(i) * 0.5f;
  EXPECT_EQ(b.resident_bytes(), 8 * kPage);
  b.release(span);
  EXPECT_EQ(b.resident_bytes(), 0);
  // The anonymous pages keep their values, the file-backed ones come back.
  for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(b.data()[i], float(i) * 0.5f) << i;
  EXPECT_EQ(b.resident_bytes(), 8 * kPage);
  b.release({span.begin + per, span.begin + 2 * per});
  EXPECT_EQ(b.resident_bytes(), 7 * kPage);
  b.touch({span.begin + per, span.begin + 2 * per});
  EXPECT_EQ(b.resident_bytes(), 8 * kPage);
  b.release_all();
  EXPECT_EQ(file->sample(), 0);
  EXPECT_EQ(b.peak_resident_bytes(), 0);  // sample() is what records peaks
  b.touch(span);
  EXPECT_EQ(file->sample(), 8 * kPage);
  EXPECT_EQ(b.peak_resident_bytes(), 8 * kPage);
  const auto u = file->usage();
  ASSERT_EQ(u.size(), 1u);
  EXPECT_EQ(u[0].label, "exa::params");
  EXPECT_EQ(u[0].peak_resident, 8 * kPage);
  fs::remove_all(dir);
}

TEST(OffloadTier, AdjacentSpansShareOneMappingAndTheFileIsGone) {
  const auto dir = scratch_dir("spans");
  auto file = std::make_shared<OffloadFile>(dir.string(), 3);
  // The unlinked file leaves nothing in the directory.
  EXPECT_TRUE(fs::is_empty(dir));
  const std::int64_t per = kPage / 4;
  // Two spans meeting inside a page: one mapping of their hull (3 pages).
  TieredBuffer b("exa::grads", 4 * per, {{per / 2, per + per / 2}, {per + per / 2, 3 * per}}, file);
  EXPECT_EQ(b.offloaded_bytes(), 3 * kPage);
  for (std::int64_t i = 0; i < 4 * per; ++i) b.data()[i] = 1.0f + float(i);
  b.release({per / 2, per + per / 2});
  for (std::int64_t i = 0; i < 4 * per; ++i) ASSERT_EQ(b.data()[i], 1.0f + float(i)) << i;
  fs::remove_all(dir);
}

// zero() writes zeros over a span without bringing its whole pages in (a
// hole punched in the file, reserved again), keeping everything around it.
TEST(OffloadTier, ZeroLeavesTheRestAndBringsNothingIn) {
  const auto dir = scratch_dir("zero");
  auto file = std::make_shared<OffloadFile>(dir.string(), 0);
  const std::int64_t per = kPage / 4, n = 10 * per;
  TieredBuffer b("exa::grads", n, {{0, n}}, file);
  for (std::int64_t i = 0; i < n; ++i) b.data()[i] = 1.0f + float(i);
  b.release_all();
  // From the middle of page 1 to the middle of page 8: pages 2-7 whole.
  const ElementSpan z{per + per / 2, 8 * per + per / 2};
  b.zero(z);
  EXPECT_LE(b.resident_bytes(), 2 * kPage) << "zero() brought whole pages in";
  for (std::int64_t i = 0; i < n; ++i) {
    const bool in = i >= z.begin && i < z.end;
    ASSERT_EQ(b.data()[i], in ? 0.0f : 1.0f + float(i)) << i;
  }
  EXPECT_EQ(file->bytes(), 10 * kPage);
  fs::remove_all(dir);
}

TEST(OffloadTier, LedgerCountsTheAnonymousPartAndTheSampledPages) {
  ASSERT_TRUE(exa::MemoryLedger::install());
  const auto at = [](exa::MemCategory c) { return exa::MemoryLedger::snapshot()[std::size_t(c)].current; };
  const auto dir = scratch_dir("ledger");
  auto file = std::make_shared<OffloadFile>(dir.string(), 0);
  const std::int64_t per = kPage / 4, before = at(exa::MemCategory::Optimizer);
  {
    TieredBuffer b("exa::optim::exp_avg", 6 * per, {{2 * per, 6 * per}}, file);
    EXPECT_EQ(at(exa::MemCategory::Optimizer) - before, 2 * kPage);
    // Two pages touched; the kernel's fault-around may map the cached
    // pages next to a faulting one too (up to 64 KiB aligned), so 2 to 4.
    b.touch({2 * per, 4 * per});
    file->sample();
    EXPECT_GE(at(exa::MemCategory::Offload), 2 * kPage);
    EXPECT_LE(at(exa::MemCategory::Offload), 4 * kPage);
    b.release_all();
    file->sample();
    EXPECT_EQ(at(exa::MemCategory::Offload), 0);
  }
  EXPECT_EQ(at(exa::MemCategory::Optimizer), before);
  fs::remove_all(dir);
}

TEST(OffloadTier, BadDirectoriesAreRefusedByName) {
  const auto dir = scratch_dir("bad");
  const std::string missing = (dir / "no_such_dir").string();
  try {
    OffloadFile f(missing, 0);
    FAIL() << "a missing directory was accepted";
  } catch (const exa::Error& e) {
    EXPECT_NE(std::string(e.what()).find("memory.offload_dir '" + missing + "' does not exist"), std::string::npos)
        << e.what();
  }
  const std::string plain = (dir / "a_file").string();
  std::fclose(std::fopen(plain.c_str(), "w"));
  try {
    OffloadFile f(plain, 0);
    FAIL() << "a plain file was accepted as the directory";
  } catch (const exa::Error& e) {
    EXPECT_NE(std::string(e.what()).find("is not a directory"), std::string::npos) << e.what();
  }
  fs::remove_all(dir);
}

TEST(OffloadTier, AFullDiskFailsAtReserveNamingTheDirectory) {
  // /dev/full-like behaviour needs a small file system; posix_fallocate of
  // more than any disk holds gives ENOSPC (or EFBIG) the same way.
  const auto dir = scratch_dir("full");
  OffloadFile f(dir.string(), 0);
  try {
    f.reserve(std::int64_t(1) << 62, "routed experts");
    FAIL() << "reserving 4 EiB succeeded";
  } catch (const exa::Error& e) {
    const std::string m = e.what();
    EXPECT_NE(m.find("memory.offload_dir '" + dir.string() + "' has no room"), std::string::npos) << m;
    EXPECT_NE(m.find("routed experts"), std::string::npos) << m;
  }
  EXPECT_EQ(f.bytes(), 0);
  fs::remove_all(dir);
}

#else  // CUDA builds: host memory, prefetched to the GPU

#include <cuda_runtime_api.h>

namespace {

// nvcc takes no device lambda inside a test body (a private member).
void write_halves(float* p, std::int64_t n) {
  Kokkos::parallel_for(
      "write", Kokkos::RangePolicy<Kokkos::Cuda>(0, n), KOKKOS_LAMBDA(const std::int64_t i) { p[i] = 0.5f * float(i); });
  Kokkos::fence();
}

double device_sum(const float* p, std::int64_t b, std::int64_t e) {
  double sum = 0;
  Kokkos::parallel_reduce(
      "sum", Kokkos::RangePolicy<Kokkos::Cuda>(b, e), KOKKOS_LAMBDA(const std::int64_t i, double& s) { s += p[i]; },
      sum);
  return sum;
}

}  // namespace

// Where the last prefetch of [b, e) went (cudaCpuDeviceId: the host; -2:
// parts went to different places, or none was prefetched).
int last_prefetch(const float* p, std::int64_t b, std::int64_t e) {
  int where = -2;
  EXPECT_EQ(cudaMemRangeGetAttribute(&where, sizeof(where), cudaMemRangeAttributeLastPrefetchLocation, p + b,
                                     std::size_t(e - b) * sizeof(float)),
            cudaSuccess);
  return where;
}

// Every element is right wherever it lives (the device writes the host
// pages in place, the host reads what the device wrote); the host pages are
// the span's whole pages, the one it shares with its neighbour stays with
// the device; the prefetches really move the pages, and the resident bytes
// are exactly those touched and not released.
TEST(OffloadTier, HostMemoryTierKeepsValuesAndCountsPrefetches) {
  ASSERT_TRUE(exa::MemoryLedger::install());
  try {
    OffloadFile f("/tmp", 0);
    FAIL() << "a directory was accepted for the host-memory tier";
  } catch (const exa::Error& e) {
    EXPECT_NE(std::string(e.what()).find("remove memory.offload_dir"), std::string::npos) << e.what();
  }
  auto file = std::make_shared<OffloadFile>("", 0);
  const std::int64_t per = kPage / 4, n = 128 * per;
  const ElementSpan span{per / 2, 100 * per + per / 2};  // host pages: [per, 100 per)
  const auto params = [] { return exa::MemoryLedger::snapshot()[std::size_t(exa::MemCategory::Parameters)].current; };
  const auto before = params();
  int dev = 0;
  ASSERT_EQ(cudaGetDevice(&dev), cudaSuccess);
  {
    TieredBuffer b("exa::params", n, {span}, file);
    EXPECT_EQ(b.offloaded_bytes(), 99 * kPage);
    EXPECT_EQ(params() - before, n * 4 - 99 * kPage);
    EXPECT_EQ(b.resident_bytes(), 0);
    float* p = b.data();
    write_halves(p, n);
    b.touch({span.begin, 3 * per});      // host pages [per, 3 per)
    b.touch({2 * per, 5 * per + 7});     // [2 per, 5 per): together [per, 5 per)
    b.wait_touches();
    Kokkos::fence();
    EXPECT_EQ(b.resident_bytes(), 4 * kPage);
    EXPECT_EQ(file->sample(), 4 * kPage);
    EXPECT_EQ(last_prefetch(p, per, 5 * per), dev);
    b.release({2 * per, 3 * per});
    EXPECT_EQ(b.resident_bytes(), 3 * kPage);
    ASSERT_EQ(cudaDeviceSynchronize(), cudaSuccess);
    EXPECT_EQ(last_prefetch(p, 2 * per, 3 * per), cudaCpuDeviceId);
    EXPECT_EQ(last_prefetch(p, per, 2 * per), dev);
    int preferred = -2;
    ASSERT_EQ(cudaMemRangeGetAttribute(&preferred, sizeof(preferred), cudaMemRangeAttributePreferredLocation,
                                       p + 10 * per, std::size_t(per) * 4),
              cudaSuccess);
    EXPECT_EQ(preferred, cudaCpuDeviceId);
    ASSERT_EQ(cudaMemRangeGetAttribute(&preferred, sizeof(preferred), cudaMemRangeAttributePreferredLocation, p,
                                       std::size_t(per) * 4),
              cudaSuccess);
    EXPECT_EQ(preferred, dev) << "the page the span shares with its neighbour left the device";
    for (std::int64_t i = 0; i < n; ++i) ASSERT_EQ(p[i], 0.5f * float(i)) << i;
    // Across the shared first page and two host pages.
    const ElementSpan z{span.begin + 10, 3 * per + 10};
    b.zero(z);
    const double sum = device_sum(p, span.begin, 3 * per + 30);
    double want = 0;
    for (std::int64_t i = span.begin; i < 3 * per + 30; ++i) want += (i >= z.begin && i < z.end) ? 0.0 : 0.5 * i;
    EXPECT_EQ(sum, want);
    b.release_all();
    EXPECT_EQ(file->sample(), 0);
    EXPECT_EQ(b.peak_resident_bytes(), 4 * kPage);
  }
  EXPECT_EQ(params(), before);
}

#endif
