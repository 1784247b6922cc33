#pragma once
// The file-backed memory tier of memory.offload_experts on host builds
// (docs/architecture.md, "Expert offload"). On a CPU node host and device
// memory are one, so, as ZeRO-Infinity does with NVMe, offloaded tensors
// live in a file on node-local disk and come into memory only while used.
//
// A TieredBuffer is one flat array of floats: the spans it is given are
// mapped from the rank's OffloadFile (MAP_SHARED), the rest is anonymous
// memory. Every address stays valid and every read or write is correct at
// all times: a page that is not resident faults in from the page cache or
// the disk. What the owner controls is only residency: touch() brings a
// span's pages into this process (from a prefetch thread, so the fault
// cost overlaps compute), release() takes them out of its resident set
// (madvise DONTNEED; their contents stay in the file, dirty pages are
// written back by the kernel). That is why every code path that reads the
// buffer (optimizer, norms, collectives, checkpoints) needs no change.
//
// resident_bytes() measures, from /proc/self/pagemap, the file-backed pages
// this process has mapped: the ledger's "offload" category is this
// measurement, sampled at the points the owner chooses.
//
// On CUDA builds the parameters live in device memory and the tier is host
// memory (offload_tier_managed.cpp): the whole buffer is CUDA managed
// memory, the spans' whole pages preferring the host and mapped for the
// device, the rest (with the pages a span shares with a neighbour)
// preferring the device. A kernel may read or write any element at any
// time (a page that is not on the device is read in place over the bus),
// touch() prefetches a span's host pages to the device on a copy stream of
// its own, release() sends them back to host memory, and resident_bytes()
// is those pages prefetched and not yet released: a device fault does not
// migrate them, as their preferred location is the host. There is no file:
// OffloadFile is then only the registry of the rank's tiered buffers.
#include <Kokkos_Macros.hpp>

#include <cstdint>
#include <memory>
#include <mutex>
#include <string>
#include <vector>

#include "core/span_set.hpp"

namespace exa {

class TieredBuffer;

// The rank's offload file under `dir`: created, then unlinked at once, so
// that no run leaves one behind, whatever ends it. exa::Error naming the
// directory when it is missing, not a directory or not writable.
class OffloadFile {
 public:
  // On CUDA builds `dir` must be empty (the tier is host memory); elsewhere
  // it is the directory of the file.
  OffloadFile(const std::string& dir, int rank);
  // Whether this build's tier is host memory for a device (CUDA managed
  // memory) rather than a file.
  static constexpr bool host_memory_tier();
  ~OffloadFile();
  OffloadFile(const OffloadFile&) = delete;
  OffloadFile& operator=(const OffloadFile&) = delete;

  const std::string& dir() const { return dir_; }
  // Room for `bytes` more at the file's end (posix_fallocate: a full disk
  // fails here, at start-up, never later as a fault); its offset.
  // exa::Error naming the directory, the bytes and `what` when it fails.
  std::int64_t reserve(std::int64_t bytes, const std::string& what);
  int fd() const { return fd_; }
  std::int64_t bytes() const { return size_; }

  // Resident bytes of every buffer mapped from this file, once the kernels
  // that touch them have finished (a fence), each buffer's sum updated into
  // its peak, the total into the ledger's offload category.
  std::int64_t sample();
  // Every buffer's offloaded pages out of the resident set, sampled first
  // (what the sweep before brought in counts).
  void release_all();
  // Each buffer's label, bytes in the file and most resident bytes sampled.
  struct Usage {
    std::string label;
    std::int64_t offloaded = 0, peak_resident = 0;
  };
  std::vector<Usage> usage();
  void attach(TieredBuffer* b);
  void detach(TieredBuffer* b);

 private:
  std::string dir_;
  int fd_ = -1;
  std::int64_t size_ = 0;
  std::mutex mutex_;
  std::vector<TieredBuffer*> buffers_;
};

class TieredBuffer {
 public:
  // n zeroed floats; the pages that cover `spans` (sorted, disjoint) come
  // from `file`. `label` names it in messages and reports.
  TieredBuffer(std::string label, std::int64_t n, std::vector<ElementSpan> spans, std::shared_ptr<OffloadFile> file);
  ~TieredBuffer();
  TieredBuffer(const TieredBuffer&) = delete;
  TieredBuffer& operator=(const TieredBuffer&) = delete;

  float* data() const { return base_; }
  std::int64_t size() const { return n_; }
  const std::string& label() const { return label_; }
  const std::vector<ElementSpan>& spans() const { return spans_; }
  // Bytes of the file this buffer maps (its spans' whole pages).
  std::int64_t offloaded_bytes() const;

  // The pages of `s` (which must lie in one of the spans) out of, or into,
  // this process's resident set. Both are safe at any time from any thread:
  // they change where the data is, never what it is.
  void release(ElementSpan s) const;
  void touch(ElementSpan s) const;
  // Work queued afterwards on the default execution instance runs after
  // the touches issued so far: a no-op on host builds (touch() reads the
  // pages itself); on CUDA the compute stream waits for the copy stream's
  // prefetches (the host does not).
  void wait_touches() const;
  void release_all() const;
  // Zeros of `s` (inside one of the spans) without bringing it in: its
  // whole pages become a hole in the file (discarding their dirty pages,
  // which are then never written back) reserved again, the partial pages
  // at its ends are written. Falls back to writing zeros where the file
  // system cannot punch holes.
  void zero(ElementSpan s) const;

  // Mapped file-backed pages now (pagemap), and the most seen by sample().
  std::int64_t resident_bytes() const;
  std::int64_t peak_resident_bytes() const { return peak_; }
  void note_sample(std::int64_t bytes) {
    if (bytes > peak_) peak_ = bytes;
  }

 private:
  // A span's page hull as it is mapped from the file.
  struct Mapping {
    char* begin;
    std::int64_t bytes;
    std::int64_t at;  // its offset in the file
  };
  const Mapping& mapping_of(ElementSpan s) const;

  std::string label_;
  std::int64_t n_ = 0;
  float* base_ = nullptr;
  std::size_t bytes_ = 0;  // of the whole reservation (pages)
  std::vector<ElementSpan> spans_;
  std::vector<Mapping> maps_;
  std::shared_ptr<OffloadFile> file_;
  std::int64_t peak_ = 0;
  // The managed tier (CUDA builds): its copy stream (a cudaStream_t) and an
  // event on it (a cudaEvent_t), its device, the elements of a host page,
  // and the host parts' elements prefetched to the device (sorted,
  // disjoint). host_part(s): the span's whole host pages.
  ElementSpan host_part(ElementSpan s) const;
  void* stream_ = nullptr;
  void* event_ = nullptr;
  int device_ = -1;
  std::int64_t page_elements_ = 1024;
  mutable std::mutex on_device_mutex_;
  mutable SpanSet on_device_;
};

constexpr bool OffloadFile::host_memory_tier() {
#if defined(KOKKOS_ENABLE_CUDA)
  return true;
#else
  return false;
#endif
}

}  // namespace exa
