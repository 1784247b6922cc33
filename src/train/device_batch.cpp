#include "train/device_batch.hpp"

#include <algorithm>

#include "core/error.hpp"

namespace exa::train {

DeviceBatch::DeviceBatch(std::int64_t batch, std::int64_t seq_len, parallel::context::Zigzag zz)
    : inputs("exa::inputs", batch, seq_len / zz.cp), targets("exa::targets", batch, seq_len / zz.cp), zz_(zz) {
  if (zz_.cp > 1) zz_.chunk_len(seq_len);  // refuses a length the zigzag cannot split
}

void DeviceBatch::upload(const io::Batch& b) {
  EXA_ASSERT(b.size == std::int64_t(inputs.extent(0)) && b.seq_len == std::int64_t(inputs.extent(1)) * zz_.cp);
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
}

}  // namespace exa::train
