#include "core/offload_tier.hpp"

#include <Kokkos_Core.hpp>
#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <cerrno>
#include <linux/falloc.h>
#include <cstring>

#include "core/error.hpp"
#include "core/memory_ledger.hpp"

namespace exa {

namespace {

std::int64_t page_bytes() {
  static const std::int64_t p = sysconf(_SC_PAGESIZE);
  return p;
}

[[maybe_unused]] std::int64_t floor_page(std::int64_t b) { return b / page_bytes() * page_bytes(); }
[[maybe_unused]] std::int64_t ceil_page(std::int64_t b) { return (b + page_bytes() - 1) / page_bytes() * page_bytes(); }

const char* kFix = "point memory.offload_dir at a writable directory on node-local disk (e.g. /tmp or the job's local "
                   "scratch)";

}  // namespace

OffloadFile::OffloadFile(const std::string& dir, int rank) : dir_(dir) {
  if constexpr (host_memory_tier()) {
    EXA_REQUIRE(dir.empty(),
                "memory.offload_dir '{}': this CUDA build offloads experts to host memory, not to a file; remove "
                "memory.offload_dir",
                dir);
    (void)rank;
    dir_ = "host memory";
    return;
  }
  struct stat st {};
  EXA_REQUIRE(!dir.empty(), "memory.offload_dir is empty: {}", kFix);
  EXA_REQUIRE(::stat(dir.c_str(), &st) == 0, "memory.offload_dir '{}' does not exist: create it, or {}", dir, kFix);
  EXA_REQUIRE(S_ISDIR(st.st_mode), "memory.offload_dir '{}' is not a directory: {}", dir, kFix);
  std::string path = dir + "/examoe-offload-rank" + std::to_string(rank) + "-XXXXXX";
  fd_ = ::mkstemp(path.data());
  EXA_REQUIRE(fd_ >= 0, "memory.offload_dir '{}': cannot create the offload file ({}): {}", dir, std::strerror(errno),
              kFix);
  // Unlinked at once: the file lives as long as this process holds it.
  ::unlink(path.c_str());
}

OffloadFile::~OffloadFile() {
  if (fd_ >= 0) ::close(fd_);
}

std::int64_t OffloadFile::reserve(std::int64_t bytes, const std::string& what) {
  EXA_ASSERT(fd_ >= 0);
  const std::int64_t at = size_;
  if (bytes <= 0) return at;
  const int rc = ::posix_fallocate(fd_, at, bytes);
  EXA_REQUIRE(rc == 0,
              "memory.offload_dir '{}' has no room for {:.1f} MiB more of {} ({} MiB reserved so far): {}; free space "
              "there, or {}",
              dir_, double(bytes) / 1048576.0, what, double(at) / 1048576.0, std::strerror(rc), kFix);
  size_ += bytes;
  return at;
}

void OffloadFile::attach(TieredBuffer* b) {
  std::lock_guard<std::mutex> lock(mutex_);
  buffers_.push_back(b);
}

void OffloadFile::detach(TieredBuffer* b) {
  std::lock_guard<std::mutex> lock(mutex_);
  buffers_.erase(std::remove(buffers_.begin(), buffers_.end(), b), buffers_.end());
}

std::int64_t OffloadFile::sample() {
  Kokkos::fence();
  std::lock_guard<std::mutex> lock(mutex_);
  std::int64_t sum = 0;
  for (auto* b : buffers_) {
    const std::int64_t r = b->resident_bytes();
    b->note_sample(r);
    sum += r;
  }
  MemoryLedger::set_sampled(MemCategory::Offload, sum);
  return sum;
}

std::vector<OffloadFile::Usage> OffloadFile::usage() {
  std::lock_guard<std::mutex> lock(mutex_);
  std::vector<Usage> out;
  for (auto* b : buffers_) out.push_back({b->label(), b->offloaded_bytes(), b->peak_resident_bytes()});
  return out;
}

void OffloadFile::release_all() {
  sample();
  std::lock_guard<std::mutex> lock(mutex_);
  for (auto* b : buffers_) b->release_all();
}

// The file-mapped tier of host builds; CUDA builds have the managed one
// (offload_tier_managed.cpp).
#if !defined(KOKKOS_ENABLE_CUDA)

TieredBuffer::TieredBuffer(std::string label, std::int64_t n, std::vector<ElementSpan> spans,
                           std::shared_ptr<OffloadFile> file)
    : label_(std::move(label)), n_(n), spans_(std::move(spans)), file_(std::move(file)) {
  EXA_ASSERT(file_ != nullptr && n_ >= 0);
  bytes_ = std::size_t(std::max(ceil_page(n_ * std::int64_t(sizeof(float))), page_bytes()));
  void* p = ::mmap(nullptr, bytes_, PROT_READ | PROT_WRITE, MAP_PRIVATE | MAP_ANONYMOUS, -1, 0);
  EXA_REQUIRE(p != MAP_FAILED, "{}: cannot map {:.1f} MiB: {}", label_, double(bytes_) / 1048576.0,
              std::strerror(errno));
  base_ = static_cast<float*>(p);
  // Each span's page hull, hulls that touch merged: boundary pages shared
  // with a neighbour come from the file too (any page may, see above).
  std::vector<std::pair<std::int64_t, std::int64_t>> hulls;
  for (const auto& s : spans_) {
    EXA_ASSERT(s.begin >= 0 && s.end <= n_ && (hulls.empty() || s.begin >= spans_.front().begin));
    if (s.empty()) continue;
    const std::int64_t b = floor_page(s.begin * 4), e = std::min(ceil_page(s.end * 4), std::int64_t(bytes_));
    if (!hulls.empty() && b <= hulls.back().second) hulls.back().second = std::max(hulls.back().second, e);
    else hulls.emplace_back(b, e);
  }
  std::int64_t mapped = 0;
  try {
    for (const auto& [b, e] : hulls) {
      const std::int64_t at = file_->reserve(e - b, label_);
      char* addr = reinterpret_cast<char*>(base_) + b;
      void* q = ::mmap(addr, std::size_t(e - b), PROT_READ | PROT_WRITE, MAP_SHARED | MAP_FIXED, file_->fd(), at);
      EXA_REQUIRE(q == addr, "{}: cannot map {:.1f} MiB of the offload file in '{}': {}", label_,
                  double(e - b) / 1048576.0, file_->dir(), std::strerror(errno));
      maps_.push_back({addr, e - b, at});
      mapped += e - b;
    }
  } catch (...) {
    ::munmap(base_, bytes_);
    throw;
  }
  MemoryLedger::record(label_, std::int64_t(bytes_) - mapped);
  file_->attach(this);
}

TieredBuffer::~TieredBuffer() {
  file_->detach(this);
  ::munmap(base_, bytes_);
  MemoryLedger::record(label_, -(std::int64_t(bytes_) - offloaded_bytes()));
}

std::int64_t TieredBuffer::offloaded_bytes() const {
  std::int64_t b = 0;
  for (const auto& m : maps_) b += m.bytes;
  return b;
}

const TieredBuffer::Mapping& TieredBuffer::mapping_of(ElementSpan s) const {
  const char* b = reinterpret_cast<const char*>(base_ + s.begin);
  const char* e = reinterpret_cast<const char*>(base_ + s.end);
  for (const auto& m : maps_)
    if (b >= m.begin && e <= m.begin + m.bytes) return m;
  internal_error(__FILE__, __LINE__, label_ + ": a span outside the offloaded ones");
}

void TieredBuffer::release(ElementSpan s) const {
  if (s.empty()) return;
  const auto& m = mapping_of(s);
  // Whole pages of the span's hull, inside its mapping: file-backed, so
  // dropping them loses nothing (never an anonymous page, whose contents
  // DONTNEED would zero).
  char* b = reinterpret_cast<char*>(base_) + floor_page(s.begin * 4);
  char* e = std::min(reinterpret_cast<char*>(base_) + ceil_page(s.end * 4), m.begin + m.bytes);
  b = std::max(b, m.begin);
  if (e > b) ::madvise(b, std::size_t(e - b), MADV_DONTNEED);
}

void TieredBuffer::zero(ElementSpan s) const {
  if (s.empty()) return;
  const auto& m = mapping_of(s);
  char* const base = reinterpret_cast<char*>(base_);
  char* const b = base + s.begin * 4;
  char* const e = base + s.end * 4;
  char* const pb = base + ceil_page(s.begin * 4);
  char* const pe = base + floor_page(s.end * 4);
  if (pe <= pb) {
    std::memset(b, 0, std::size_t(e - b));
    return;
  }
  const off_t at = off_t(m.at + (pb - m.begin));
  const off_t len = off_t(pe - pb);
  if (::fallocate(file_->fd(), FALLOC_FL_PUNCH_HOLE | FALLOC_FL_KEEP_SIZE, at, len) == 0) {
    // The room again, so that no later write can fail for want of it.
    const int rc = ::posix_fallocate(file_->fd(), at, len);
    EXA_REQUIRE(rc == 0, "memory.offload_dir '{}': cannot reserve {:.1f} MiB again after zeroing {}: {}", file_->dir(),
                double(len) / 1048576.0, label_, std::strerror(rc));
  } else {
    std::memset(pb, 0, std::size_t(pe - pb));
  }
  std::memset(b, 0, std::size_t(pb - b));
  std::memset(pe, 0, std::size_t(e - pe));
}

void TieredBuffer::touch(ElementSpan s) const {
  if (s.empty()) return;
  const volatile char* p = reinterpret_cast<const volatile char*>(base_ + s.begin);
  const volatile char* e = reinterpret_cast<const volatile char*>(base_ + s.end);
  const std::int64_t step = page_bytes();
  for (; p < e; p += step) (void)*p;
  (void)*(e - 1);
}

void TieredBuffer::wait_touches() const {}

void TieredBuffer::release_all() const {
  for (const auto& m : maps_) ::madvise(m.begin, std::size_t(m.bytes), MADV_DONTNEED);
}

std::int64_t TieredBuffer::resident_bytes() const {
  if (maps_.empty()) return 0;
  const int fd = ::open("/proc/self/pagemap", O_RDONLY | O_CLOEXEC);
  if (fd < 0) return 0;
  std::int64_t pages = 0;
  std::vector<std::uint64_t> entries;
  for (const auto& m : maps_) {
    const std::int64_t n = m.bytes / page_bytes();
    entries.resize(std::size_t(n));
    const off_t at = off_t(reinterpret_cast<std::uintptr_t>(m.begin) / std::uintptr_t(page_bytes()) * 8);
    const ssize_t got = ::pread(fd, entries.data(), std::size_t(n) * 8, at);
    for (ssize_t i = 0; i < got / 8; ++i) pages += (entries[std::size_t(i)] >> 63) & 1u;
  }
  ::close(fd);
  return pages * page_bytes();
}

#endif  // !KOKKOS_ENABLE_CUDA

}  // namespace exa
