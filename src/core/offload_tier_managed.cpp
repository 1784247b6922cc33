// The CUDA builds' offload tier: host memory for a device that holds the
// parameters (core/offload_tier.hpp says what each call means).
//
// One managed allocation keeps the store one flat array, which is what lets
// every code path (the optimizer, norms, collectives, checkpoints) read it
// unchanged, as the file mapping does on host builds. The whole host pages
// of the offloaded spans (their "host parts") prefer the host and are
// mapped for the device (AccessedBy): a kernel that reads one before it is
// prefetched reads it in place, and a device fault does not migrate it.
// So the host parts' pages on the device are the ones touch() prefetched
// and release() has not sent back, which resident_bytes() counts; a host
// access in between (zero()) can only bring pages back sooner. Prefetches
// run on a stream of their own, so they overlap the compute stream's work.
#include <Kokkos_Core.hpp>

#include "core/offload_tier.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>

#include <unistd.h>

#include <algorithm>
#include <cstddef>
#include <cstdint>
#include <cstring>

#include "core/error.hpp"
#include "core/memory_ledger.hpp"

namespace exa {

namespace {

void cuda_check(cudaError_t e, const std::string& label, const char* what) {
  EXA_REQUIRE(e == cudaSuccess, "{}: {} failed: {} (memory.offload_experts on CUDA)", label, what,
              cudaGetErrorString(e));
}

cudaStream_t stream_of(void* s) { return static_cast<cudaStream_t>(s); }

// CUDA 13 names a location (cudaMemLocation) where 11 and 12 take a
// device ordinal, cudaCpuDeviceId for the host.
#if CUDART_VERSION >= 13000
cudaMemLocation location_of(int device) {
  cudaMemLocation l{};
  l.type = device == cudaCpuDeviceId ? cudaMemLocationTypeHost : cudaMemLocationTypeDevice;
  l.id = device == cudaCpuDeviceId ? 0 : device;
  return l;
}
cudaError_t advise(const void* p, std::size_t n, cudaMemoryAdvise a, int device) {
  return cudaMemAdvise(p, n, a, location_of(device));
}
cudaError_t prefetch(const void* p, std::size_t n, int device, cudaStream_t s) {
  return cudaMemPrefetchAsync(p, n, location_of(device), 0, s);
}
#else
cudaError_t advise(const void* p, std::size_t n, cudaMemoryAdvise a, int device) {
  return cudaMemAdvise(p, n, a, device);
}
cudaError_t prefetch(const void* p, std::size_t n, int device, cudaStream_t s) {
  return cudaMemPrefetchAsync(p, n, device, s);
}
#endif

}  // namespace

// A span's whole host pages, as elements of the buffer: the part of it that
// lives in host memory. The pages at its ends that it shares with a
// neighbour prefer the device with the rest, as what cudaMemAdvise and
// cudaMemPrefetchAsync act on is whole pages.
ElementSpan TieredBuffer::host_part(ElementSpan s) const {
  const std::int64_t per = page_elements_;
  ElementSpan in{(s.begin + per - 1) / per * per, s.end / per * per};
  if (in.end < in.begin) in.end = in.begin;
  return in;
}

TieredBuffer::TieredBuffer(std::string label, std::int64_t n, std::vector<ElementSpan> spans,
                           std::shared_ptr<OffloadFile> file)
    : label_(std::move(label)), n_(n), spans_(std::move(spans)), file_(std::move(file)) {
  EXA_ASSERT(file_ != nullptr && n_ >= 0);
  device_ = Kokkos::Cuda().cuda_device();
  cuda_check(cudaSetDevice(device_), label_, "cudaSetDevice");
  int concurrent = 0;
  cuda_check(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, device_), label_,
             "cudaDeviceGetAttribute");
  // The host zeroes offloaded pieces while kernels may run; without
  // concurrent access that is a fault, not a slow path.
  EXA_REQUIRE(concurrent != 0,
              "{}: GPU {} has no concurrent managed memory access (it needs Linux and a Pascal or newer GPU), which "
              "the host-memory tier of memory.offload_experts relies on; set memory.offload_experts = false",
              label_, device_);
  page_elements_ = std::int64_t(sysconf(_SC_PAGESIZE)) / std::int64_t(sizeof(float));
  bytes_ = std::size_t(std::max<std::int64_t>(n_, 1)) * sizeof(float);
  void* p = nullptr;
  cuda_check(cudaMallocManaged(&p, bytes_, cudaMemAttachGlobal), label_, "cudaMallocManaged");
  base_ = static_cast<float*>(p);
  try {
    EXA_ASSERT(reinterpret_cast<std::uintptr_t>(p) % std::uintptr_t(page_elements_ * 4) == 0);
    cudaStream_t s = nullptr;
    cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), label_, "cudaStreamCreate");
    stream_ = s;
    cudaEvent_t ev = nullptr;
    cuda_check(cudaEventCreateWithFlags(&ev, cudaEventDisableTiming), label_, "cudaEventCreate");
    event_ = ev;
    cuda_check(advise(p, bytes_, cudaMemAdviseSetPreferredLocation, device_), label_, "cudaMemAdvise");
    // Zeros where each part lives: the device writes what it keeps (the
    // gaps between the spans' host parts), the host the host parts.
    std::int64_t at = 0;
    for (const auto& sp : spans_) {
      EXA_ASSERT(sp.begin >= at && sp.end <= n_);  // sorted, disjoint
      const ElementSpan h = host_part(sp);
      if (h.empty()) continue;
      const std::size_t hb = std::size_t(h.size()) * sizeof(float);
      cuda_check(advise(base_ + h.begin, hb, cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId), label_,
                 "cudaMemAdvise");
      cuda_check(advise(base_ + h.begin, hb, cudaMemAdviseSetAccessedBy, device_), label_, "cudaMemAdvise");
      if (h.begin > at)
        cuda_check(cudaMemsetAsync(base_ + at, 0, std::size_t(h.begin - at) * sizeof(float), s), label_,
                   "cudaMemsetAsync");
      std::memset(base_ + h.begin, 0, hb);
      at = h.end;
    }
    if (at < n_)
      cuda_check(cudaMemsetAsync(base_ + at, 0, std::size_t(n_ - at) * sizeof(float), s), label_, "cudaMemsetAsync");
    cuda_check(cudaStreamSynchronize(s), label_, "cudaStreamSynchronize");
  } catch (...) {
    if (event_ != nullptr) cudaEventDestroy(static_cast<cudaEvent_t>(event_));
    if (stream_ != nullptr) cudaStreamDestroy(stream_of(stream_));
    cudaFree(p);
    throw;
  }
  MemoryLedger::record(label_, std::int64_t(bytes_) - offloaded_bytes());
  file_->attach(this);
}

TieredBuffer::~TieredBuffer() {
  file_->detach(this);
  cudaStreamSynchronize(stream_of(stream_));
  cudaEventDestroy(static_cast<cudaEvent_t>(event_));
  cudaStreamDestroy(stream_of(stream_));
  cudaFree(base_);  // waits for the device
  MemoryLedger::record(label_, -(std::int64_t(bytes_) - offloaded_bytes()));
}

std::int64_t TieredBuffer::offloaded_bytes() const {
  std::int64_t b = 0;
  for (const auto& s : spans_) b += host_part(s).size() * std::int64_t(sizeof(float));
  return b;
}

void TieredBuffer::touch(ElementSpan s) const {
  const ElementSpan h = host_part(s);
  if (h.empty()) return;
  // Called from the prefetch thread too, whose current device is not set.
  cuda_check(cudaSetDevice(device_), label_, "cudaSetDevice");
  cuda_check(prefetch(base_ + h.begin, std::size_t(h.size()) * sizeof(float), device_, stream_of(stream_)),
             label_, "cudaMemPrefetchAsync");
  std::lock_guard<std::mutex> lock(on_device_mutex_);
  on_device_.add(h);
}

void TieredBuffer::wait_touches() const {
  // The compute stream (Kokkos' default instance) waits for the copy
  // stream's prefetches so far; the host does not.
  cuda_check(cudaSetDevice(device_), label_, "cudaSetDevice");
  cuda_check(cudaEventRecord(static_cast<cudaEvent_t>(event_), stream_of(stream_)), label_, "cudaEventRecord");
  cuda_check(cudaStreamWaitEvent(Kokkos::Cuda().cuda_stream(), static_cast<cudaEvent_t>(event_), 0), label_,
             "cudaStreamWaitEvent");
}

void TieredBuffer::release(ElementSpan s) const {
  const ElementSpan h = host_part(s);
  if (h.empty()) return;
  cuda_check(cudaSetDevice(device_), label_, "cudaSetDevice");
  cuda_check(prefetch(base_ + h.begin, std::size_t(h.size()) * sizeof(float), cudaCpuDeviceId, stream_of(stream_)),
             label_, "cudaMemPrefetchAsync");
  std::lock_guard<std::mutex> lock(on_device_mutex_);
  on_device_.remove(h);
}

void TieredBuffer::release_all() const {
  for (const auto& s : spans_) release(s);
}

void TieredBuffer::zero(ElementSpan s) const {
  if (s.empty()) return;
  // The host part where it lives (back from the device first, as a
  // release sends it), the shared end pages on the device; the caller has
  // fenced the kernels that used them.
  const ElementSpan h = host_part(s);
  release(s);
  const auto dev_zero = [&](std::int64_t b, std::int64_t e) {
    if (e > b)
      cuda_check(cudaMemsetAsync(base_ + b, 0, std::size_t(e - b) * sizeof(float), stream_of(stream_)), label_,
                 "cudaMemsetAsync");
  };
  if (h.empty()) {
    dev_zero(s.begin, s.end);
  } else {
    dev_zero(s.begin, h.begin);
    dev_zero(h.end, s.end);
  }
  cuda_check(cudaStreamSynchronize(stream_of(stream_)), label_, "cudaStreamSynchronize");
  if (!h.empty()) std::memset(base_ + h.begin, 0, std::size_t(h.size()) * sizeof(float));
}

std::int64_t TieredBuffer::resident_bytes() const {
  std::lock_guard<std::mutex> lock(on_device_mutex_);
  return on_device_.elements() * std::int64_t(sizeof(float));
}

}  // namespace exa

#endif  // KOKKOS_ENABLE_CUDA
