#pragma once
// A micro-batch's tokens on the device: inputs and targets [B,T], filled
// from a host io::Batch. One pair of buffers is reused for every micro-batch.
#include <cstdint>

#include "core/types.hpp"
#include "io/sampler.hpp"

namespace exa::train {

struct DeviceBatch {
  Kokkos::View<std::int32_t**, Layout, Device> inputs, targets;

  DeviceBatch() = default;
  DeviceBatch(std::int64_t batch, std::int64_t seq_len);
  // b.size must equal the batch size and b.seq_len the sequence length.
  void upload(const io::Batch& b);
};

}  // namespace exa::train
