#pragma once
// A micro-batch's tokens on the device: inputs and targets [B,T], filled
// from a host io::Batch. One pair of buffers is reused for every micro-batch.
// Under context parallelism (cp > 1) the device batch holds this CP rank's
// zigzag rows of each sequence, [B, T/cp] (parallel/context/zigzag.hpp),
// taken from the whole sequences every rank of the Cp group samples.
#include <cstdint>

#include "core/types.hpp"
#include "io/sampler.hpp"
#include "model/stage_model.hpp"
#include "parallel/context/zigzag.hpp"

namespace exa::train {

struct DeviceBatch {
  Kokkos::View<std::int32_t**, Layout, Device> inputs, targets;
  // Packed batches: the documents of the whole sequences [B, seq_len]
  // (every rank of a Cp group holds them all; attention and RoPE index
  // them by position). Empty until a packed batch is uploaded.
  Kokkos::View<std::int32_t**, Layout, Device> doc_start, doc_end;

  DeviceBatch() = default;
  // seq_len: the whole sequences' length.
  DeviceBatch(std::int64_t batch, std::int64_t seq_len, parallel::context::Zigzag zz = {});
  // A batch of another shape than the last reallocates the buffers.
  void upload(const io::Batch& b);
  // upload(b), and the model's input for it (its tokens and targets).
  model::StageModel<float>::Input load(const io::Batch& b) {
    upload(b);
    model::StageModel<float>::Input in;
    in.tokens = inputs;
    in.targets = targets;
    if (b.packed()) in.documents = {doc_start, doc_end};
    return in;
  }

 private:
  parallel::context::Zigzag zz_;
};

}  // namespace exa::train
