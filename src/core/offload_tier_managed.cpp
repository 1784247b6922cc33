// The CUDA builds' offload tier: host memory for a device that holds the
// parameters (core/offload_tier.hpp says what each call means).
//
// One managed allocation keeps the store one flat array, which is what lets
// every code path (the optimizer, norms, collectives, checkpoints) read it
// unchanged, as the file mapping does on host builds. The offloaded spans
// prefer the host and are mapped for the device (AccessedBy): a kernel that
// reads one before it is prefetched reads it in place, and no fault ever
// migrates it, so the pages on the device are exactly the ones touch()
// prefetched, and the bookkeeping below is the measurement. Prefetches run
// on a stream of their own, so they overlap the compute stream's work.
#include <Kokkos_Core.hpp>

#include "core/offload_tier.hpp"

#if defined(KOKKOS_ENABLE_CUDA)
#include <cuda_runtime.h>

#include <algorithm>
#include <cstddef>
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

TieredBuffer::TieredBuffer(std::string label, std::int64_t n, std::vector<ElementSpan> spans,
                           std::shared_ptr<OffloadFile> file)
    : label_(std::move(label)), n_(n), spans_(std::move(spans)), file_(std::move(file)) {
  EXA_ASSERT(file_ != nullptr && n_ >= 0);
  device_ = Kokkos::Cuda().cuda_device();
  cuda_check(cudaSetDevice(device_), label_, "cudaSetDevice");
  int concurrent = 0;
  cuda_check(cudaDeviceGetAttribute(&concurrent, cudaDevAttrConcurrentManagedAccess, device_), label_,
             "cudaDeviceGetAttribute");
  // The host updates and zeroes offloaded pieces while kernels may run;
  // without concurrent access that is a fault, not a slow path.
  EXA_REQUIRE(concurrent != 0,
              "{}: GPU {} has no concurrent managed memory access (it needs Linux and a Pascal or newer GPU), which "
              "the host-memory tier of memory.offload_experts relies on; set memory.offload_experts = false",
              label_, device_);
  bytes_ = std::size_t(std::max<std::int64_t>(n_, 1)) * sizeof(float);
  void* p = nullptr;
  cuda_check(cudaMallocManaged(&p, bytes_, cudaMemAttachGlobal), label_, "cudaMallocManaged");
  base_ = static_cast<float*>(p);
  cudaStream_t s = nullptr;
  cuda_check(cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking), label_, "cudaStreamCreate");
  stream_ = s;
  cuda_check(advise(p, bytes_, cudaMemAdviseSetPreferredLocation, device_), label_, "cudaMemAdvise");
  for (const auto& sp : spans_) {
    EXA_ASSERT(sp.begin >= 0 && sp.end <= n_);
    if (sp.empty()) continue;
    const std::size_t b = std::size_t(sp.size()) * sizeof(float);
    cuda_check(advise(base_ + sp.begin, b, cudaMemAdviseSetPreferredLocation, cudaCpuDeviceId), label_,
               "cudaMemAdvise");
    cuda_check(advise(base_ + sp.begin, b, cudaMemAdviseSetAccessedBy, device_), label_, "cudaMemAdvise");
  }
  // Zeros where each part lives: the host writes the spans, the device the rest.
  cuda_check(cudaMemsetAsync(p, 0, bytes_, s), label_, "cudaMemsetAsync");
  cuda_check(cudaStreamSynchronize(s), label_, "cudaStreamSynchronize");
  for (const auto& sp : spans_)
    if (!sp.empty()) {
      cuda_check(prefetch(base_ + sp.begin, std::size_t(sp.size()) * sizeof(float), cudaCpuDeviceId, s),
                 label_, "cudaMemPrefetchAsync");
    }
  cuda_check(cudaStreamSynchronize(s), label_, "cudaStreamSynchronize");
  MemoryLedger::record(label_, std::int64_t(bytes_) - offloaded_bytes());
  file_->attach(this);
}

TieredBuffer::~TieredBuffer() {
  file_->detach(this);
  cudaStreamSynchronize(stream_of(stream_));
  cudaStreamDestroy(stream_of(stream_));
  cudaFree(base_);  // waits for the device
  MemoryLedger::record(label_, -(std::int64_t(bytes_) - offloaded_bytes()));
}

std::int64_t TieredBuffer::offloaded_bytes() const {
  std::int64_t b = 0;
  for (const auto& s : spans_) b += s.size() * std::int64_t(sizeof(float));
  return b;
}

void TieredBuffer::touch(ElementSpan s) const {
  if (s.empty()) return;
  // Called from the prefetch thread too, whose current device is not set.
  cuda_check(cudaSetDevice(device_), label_, "cudaSetDevice");
  cuda_check(prefetch(base_ + s.begin, std::size_t(s.size()) * sizeof(float), device_, stream_of(stream_)),
             label_, "cudaMemPrefetchAsync");
  std::lock_guard<std::mutex> lock(on_device_mutex_);
  on_device_.add(s);
}

void TieredBuffer::wait_touches() const {
  cuda_check(cudaStreamSynchronize(stream_of(stream_)), label_, "cudaStreamSynchronize");
}

void TieredBuffer::release(ElementSpan s) const {
  if (s.empty()) return;
  cuda_check(cudaSetDevice(device_), label_, "cudaSetDevice");
  cuda_check(prefetch(base_ + s.begin, std::size_t(s.size()) * sizeof(float), cudaCpuDeviceId, stream_of(stream_)),
             label_, "cudaMemPrefetchAsync");
  std::lock_guard<std::mutex> lock(on_device_mutex_);
  on_device_.remove(s);
}

void TieredBuffer::release_all() const {
  for (const auto& s : spans_) release(s);
}

void TieredBuffer::zero(ElementSpan s) const {
  if (s.empty()) return;
  // The host writes it where it lives (a span on the device comes back
  // first, as a release would send it); the caller has fenced the kernels
  // that used it.
  release(s);
  cuda_check(cudaStreamSynchronize(stream_of(stream_)), label_, "cudaStreamSynchronize");
  std::memset(base_ + s.begin, 0, std::size_t(s.size()) * sizeof(float));
}

std::int64_t TieredBuffer::resident_bytes() const {
  std::lock_guard<std::mutex> lock(on_device_mutex_);
  return on_device_.elements() * std::int64_t(sizeof(float));
}

}  // namespace exa

#endif  // KOKKOS_ENABLE_CUDA
