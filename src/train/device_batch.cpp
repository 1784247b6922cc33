#include "train/device_batch.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace exa::train {

DeviceBatch::DeviceBatch(std::int64_t batch, std::int64_t seq_len, parallel::context::Zigzag zz)
    : inputs("exa::inputs", batch, seq_len / zz.cp), targets("exa::targets", batch, seq_len / zz.cp), zz_(zz) {
  if (zz_.cp > 1) zz_.chunk_len(seq_len);  // refuses a length the zigzag cannot split
}

void DeviceBatch::upload(const io::Batch& b) {
  // Token-budget micro-batches change shape from one to the next.
  if (b.size != std::int64_t(inputs.extent(0)) || b.seq_len != std::int64_t(inputs.extent(1)) * zz_.cp)
    *this = DeviceBatch(b.size, b.seq_len, zz_);
  // LayoutRight [B,T] is the Batch's own row-major order: one flat copy each.
  auto hi = Kokkos::create_mirror_view(inputs);
  auto ht = Kokkos::create_mirror_view(targets);
  if (zz_.cp > 1) {
    const auto si = zz_.slice(b.inputs, b.size, b.seq_len), st = zz_.slice(b.targets, b.size, b.seq_len);
    std::copy(si.begin(), si.end(), hi.data());
    std::copy(st.begin(), st.end(), ht.data());
  } else {
    std::copy(b.inputs.begin(), b.inputs.end(), hi.data());
    std::copy(b.targets.begin(), b.targets.end(), ht.data());
  }
  Kokkos::deep_copy(inputs, hi);
  Kokkos::deep_copy(targets, ht);
  if (!b.packed()) return;
  EXA_ASSERT(b.doc_start.size() == b.inputs.size() && b.doc_end.size() == b.inputs.size());
  if (doc_start.extent(0) != std::size_t(b.size) || doc_start.extent(1) != std::size_t(b.seq_len)) {
    doc_start = Kokkos::View<std::int32_t**, Layout, Device>("exa::doc_start", b.size, b.seq_len);
    doc_end = Kokkos::View<std::int32_t**, Layout, Device>("exa::doc_end", b.size, b.seq_len);
  }
  auto hs = Kokkos::create_mirror_view(doc_start);
  auto he = Kokkos::create_mirror_view(doc_end);
  std::copy(b.doc_start.begin(), b.doc_start.end(), hs.data());
  std::copy(b.doc_end.begin(), b.doc_end.end(), he.data());
  Kokkos::deep_copy(doc_start, hs);
  Kokkos::deep_copy(doc_end, he);
}

}  // namespace exa::train
