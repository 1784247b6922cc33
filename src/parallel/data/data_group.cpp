#include "parallel/data/data_group.hpp"

#include <fmt/format.h>

#include <algorithm>
#include <functional>

#include "core/error.hpp"
#include "comm/traffic_ledger.hpp"
#include "core/profiling.hpp"

namespace exa::parallel::data {

DataGroup::DataGroup(const comm::ProcessGrid& grid, bool hierarchical, int channels, comm::Backend backend,
                     comm::Group over, kernels::WireCodec codec, kernels::WireCodec weight_codec,
                     kernels::TopkCodec topk, std::int64_t topk_warmup, bool inter_node_only)
    : size_(grid.size(over)),
      rank_(grid.rank(over)),
      block_index_(rank_),
      channels_(channels),
      over_(over),
      scalar_(comm::make_mpi_communicator(grid.comm(over))),
      codec_(codec),
      weight_codec_(weight_codec),
      topk_(topk),
      topk_warmup_(topk_warmup),
      inter_node_only_(inter_node_only) {
  EXA_ASSERT(channels >= 1);
  EXA_ASSERT(over == comm::Group::Data || (over == comm::Group::ExpertData && !hierarchical));
  EXA_REQUIRE(backend != comm::Backend::Nccl || comm::nccl_available(),
              "comm.backend = \"nccl\" needs a CUDA build with NCCL and a visible GPU (this build or node has none); "
              "set comm.backend = \"mpi\"");
  bulk_ = comm::make_transport(grid.comm(over), backend);
  if (hierarchical) {
    for (int c = 0; c < channels; ++c) hier_.push_back(comm::make_hierarchical(grid, comm::Group::Data, backend));
    block_index_ = static_cast<int>(comm::hierarchical_block_index(*hier_[0].local, *hier_[0].inter));
  }
  EXA_REQUIRE(!inter_node_only || hierarchical, "comm.compress_scope = \"inter_node\" needs the hierarchical "
              "collectives (parallel.hierarchical = true), which have an inter-node stage");
  if ((compressed() || sparse() || weights_compressed()) && size_ > 1) {
    EXA_REQUIRE(!hierarchical || inter_node_only || !(compressed() || sparse()), "comm.compression = \"{}\" with parallel.hierarchical = true "
                "compresses the inter-node stage only: set comm.compress_scope = \"inter_node\" (or "
                "parallel.hierarchical = false)", sparse() ? "topk" : kernels::wire_format_name(codec_.format()));
    if (!hierarchical)
      for (int c = 0; c < channels; ++c)
        chan_.push_back(comm::make_transport(grid.comm(over), backend));
    packed_.resize(std::size_t(channels));
  }
}

namespace {

using comm::ring_allreduce_bytes;
using comm::ring_block_bytes;

template <class V>
auto part(const V& v, std::int64_t at, std::int64_t n) {
  return Kokkos::subview(v, std::make_pair(at, at + n));
}

}  // namespace

DataGroup::Packed& DataGroup::packed(int c, std::int64_t words, std::int64_t padded, std::int64_t block) {
  auto& p = packed_[std::size_t(c)];
  auto grow = [](auto& v, std::int64_t n, const char* label) {
    if (std::int64_t(v.extent(0)) < n) v = std::decay_t<decltype(v)>(std::string(label), static_cast<std::size_t>(n));
  };
  grow(p.send, words, "exa::dp_packed_send");
  grow(p.recv, words, "exa::dp_packed_recv");
  grow(p.padded, padded, "exa::dp_packed_padded");
  grow(p.block, block, "exa::dp_packed_block");
  grow(p.decoded, block, "exa::dp_packed_decoded");
  return p;
}

DataGroup::Packed& DataGroup::node_buffers(int c, std::int64_t padded, std::int64_t part) {
  auto& p = packed_[std::size_t(c)];
  if (std::int64_t(p.node_padded.extent(0)) < padded)
    p.node_padded = View1<float>("exa::dp_packed_node_padded", std::size_t(padded));
  if (std::int64_t(p.node_part.extent(0)) < part)
    p.node_part = View1<float>("exa::dp_packed_node_part", std::size_t(part));
  return p;
}

comm::Request DataGroup::exchange_blocks(int c, std::int64_t W) {
  const int P = wire(c).size();
  auto& pk = packed_[std::size_t(c)];
  std::vector<int> counts(static_cast<std::size_t>(P), static_cast<int>(W));
  std::vector<int> displs(static_cast<std::size_t>(P));
  for (int j = 0; j < P; ++j) displs[std::size_t(j)] = int(j * W);
  return wire(c).ialltoallv(part(pk.send, 0, P * W), counts, displs, part(pk.recv, 0, P * W), counts, displs);
}

comm::Communicator& DataGroup::wire(int c) {
  return hier_.empty() ? *chan_[std::size_t(c)] : *channel(c).inter;
}

void DataGroup::set_step(std::uint64_t seed, std::int64_t step) {
  rounding_ = philox_key(seed, "comm.stochastic_rounding");
  step_ = step;
  calls_ = 0;
}

PhiloxKey DataGroup::next_key() {
  if (!codec_.stochastic()) return {0, 0};
  const PhiloxCounter at{std::uint32_t(step_), std::uint32_t(std::uint64_t(step_) >> 32),
                         std::uint32_t(rank_) | (std::uint32_t(over_) << 24), calls_++};
  const PhiloxCounter r = philox4x32(at, rounding_);
  return {r.c0, r.c1};
}

comm::Request DataGroup::compressed_reduce_scatter(const View1<float>& send, const View1<float>& recv, int c,
                                                   PhiloxKey key) {
  const std::int64_t B = std::int64_t(recv.extent(0)), W = codec_.words(B), P = wire(c).size();
  auto& pk = packed(c, P * W, 0, B);
  {
    ScopedRegion region("compress/encode");
    // Destination j's block draws under the key with j folded in.
    for (std::int64_t j = 0; j < P; ++j)
      codec_.encode(part(send, j * B, B), part(pk.send, j * W, W),
                    {key.k0, key.k1 ^ (std::uint32_t(j) * 0x9E3779B9u)});
    Kokkos::fence();
  }
  auto r = exchange_blocks(c, W);
  r.then([this, &pk, recv, B, W, P] {
    ScopedRegion region("compress/decode");
    codec_.decode(part(pk.recv, 0, W), B, recv);
    const auto d = part(pk.decoded, 0, B);
    for (std::int64_t j = 1; j < P; ++j) {
      codec_.decode(part(pk.recv, j * W, W), B, d);
      kernels::add_into(recv, d);
    }
    Kokkos::fence();
  });
  return r;
}

comm::Request DataGroup::compressed_allgather(const View1<float>& send, const View1<float>& recv, int c) {
  const std::int64_t B = std::int64_t(send.extent(0)), W = weight_codec_.words(B), P = size_;
  auto& pk = packed(c, P * W, 0, 0);
  {
    ScopedRegion region("compress/encode");
    weight_codec_.encode(send, part(pk.send, 0, W));
    Kokkos::fence();
  }
  // Flat, or both hierarchical stages moving the encoded parts (in the
  // hierarchical block order, which recv's blocks follow too).
  auto r = hierarchical()
               ? comm::ihierarchical_allgather(*channel(c).local, *channel(c).inter, part(pk.send, 0, W),
                                               part(pk.recv, 0, P * W))
               : chan_[std::size_t(c)]->iallgather(part(pk.send, 0, W), part(pk.recv, 0, P * W));
  r.then([this, &pk, recv, B, W, P] {
    ScopedRegion region("compress/decode");
    for (std::int64_t j = 0; j < P; ++j) weight_codec_.decode(part(pk.recv, j * W, W), B, part(recv, j * B, B));
    Kokkos::fence();
  });
  return r;
}

comm::Request DataGroup::inter_node_allgather(const View1<float>& send, const View1<float>& recv, int c) {
  auto& hc = channel(c);
  comm::Communicator* local = hc.local.get();
  comm::Communicator* inter = hc.inter.get();
  const std::int64_t B = std::int64_t(send.extent(0)), W = weight_codec_.words(B), L = local->size(),
                     I = inter->size();
  const double logical = ring_block_bytes(size_, B, 4);
  // Inter-node only: the nodes exchange encoded parts into this rank's run of
  // I blocks (its final place in recv), every rank of a local index decodes
  // the same words alike, and the node shares the decoded runs in fp32. On
  // one node nothing is encoded.
  comm::TrafficLedger::add(comm::Traffic::ZeroWeights, logical,
                           ring_block_bytes(int(L), I * B, 4) + ring_block_bytes(int(I), W, 4));
  const auto run = part(recv, local->rank() * I * B, I * B);
  std::vector<std::function<comm::Request()>> stages;
  if (I > 1) {
    auto& pk = packed(c, I * W, 0, 0);
    {
      ScopedRegion region("compress/encode");
      weight_codec_.encode(send, part(pk.send, 0, W));
      Kokkos::fence();
    }
    stages.emplace_back([this, &pk, inter, run, B, W, I] {
      auto r = inter->iallgather(part(pk.send, 0, W), part(pk.recv, 0, I * W));
      r.then([this, &pk, run, B, W, I] {
        ScopedRegion region("compress/decode");
        for (std::int64_t j = 0; j < I; ++j) weight_codec_.decode(part(pk.recv, j * W, W), B, part(run, j * B, B));
        Kokkos::fence();
      });
      return r;
    });
  } else {
    Kokkos::deep_copy(run, send);
  }
  if (L > 1) stages.emplace_back([local, run, recv] { return local->iallgather(run, recv); });
  return comm::chain(std::move(stages));
}

comm::Request DataGroup::compressed_allreduce(const View1<float>& v, int c, PhiloxKey scatter, PhiloxKey gather) {
  const std::int64_t n = std::int64_t(v.extent(0)), P = wire(c).size(), B = (n + P - 1) / P, W = codec_.words(B);
  auto& pk = packed(c, P * W, P * B, B);
  // The reduce-scatter's blocks: v, zero-padded to P blocks.
  Kokkos::deep_copy(part(pk.padded, 0, n), v);
  if (P * B > n) Kokkos::deep_copy(part(pk.padded, n, P * B - n), 0.0f);
  const auto padded = part(pk.padded, 0, P * B), block = part(pk.block, 0, B);
  return comm::chain(
      {[this, padded, block, c, scatter] { return compressed_reduce_scatter(padded, block, c, scatter); },
       [this, &pk, v, block, n, B, W, P, c, gather] {
         {
           ScopedRegion region("compress/encode");
           codec_.encode(block, part(pk.send, 0, W), gather);
           Kokkos::fence();
         }
         auto r = wire(c).iallgather(part(pk.send, 0, W), part(pk.recv, 0, P * W));
         r.then([this, &pk, v, n, B, W, P] {
           ScopedRegion region("compress/decode");
           for (std::int64_t j = 0; j < P && j * B < n; ++j)
             codec_.decode(part(pk.recv, j * W, W), B, part(v, j * B, std::min(B, n - j * B)));
           Kokkos::fence();
         });
         return r;
       }});
}

comm::Request DataGroup::topk_allreduce(const View1<float>& v, const View1<float>& residual, int c) {
  const std::int64_t n = std::int64_t(v.extent(0)), W = topk_.words(n), P = wire(c).size();
  auto& pk = packed(c, P * W, 0, 0);
  {
    ScopedRegion region("compress/encode");
    topk_.encode(v, residual, part(pk.send, 0, W));
  }
  auto r = wire(c).iallgather(part(pk.send, 0, W), part(pk.recv, 0, P * W));
  r.then([this, &pk, v, n, W, P] {
    ScopedRegion region("compress/decode");
    Kokkos::deep_copy(v, 0.0f);
    for (std::int64_t j = 0; j < P; ++j) topk_.decode_add(part(pk.recv, j * W, W), n, v);
  });
  return r;
}

comm::Request DataGroup::topk_reduce_scatter(const View1<float>& send, const View1<float>& recv,
                                             const View1<float>& residual, int c) {
  const std::int64_t B = std::int64_t(recv.extent(0)), W = topk_.words(B), P = wire(c).size();
  auto& pk = packed(c, P * W, 0, 0);
  {
    ScopedRegion region("compress/encode");
    for (std::int64_t j = 0; j < P; ++j)
      topk_.encode(part(send, j * B, B), part(residual, j * B, B), part(pk.send, j * W, W));
  }
  auto r = exchange_blocks(c, W);
  r.then([this, &pk, recv, B, W, P] {
    ScopedRegion region("compress/decode");
    Kokkos::deep_copy(recv, 0.0f);
    for (std::int64_t j = 0; j < P; ++j) topk_.decode_add(part(pk.recv, j * W, W), B, recv);
  });
  return r;
}

comm::Request DataGroup::inter_node_allreduce(const View1<float>& v, int c, const View1<float>& residual) {
  auto& hc = channel(c);
  comm::Communicator* local = hc.local.get();
  const std::int64_t n = std::int64_t(v.extent(0)), L = local->size(), I = hc.inter->size(), B = (n + L - 1) / L;
  auto& nb = node_buffers(c, L * B, B);
  const auto padded = part(nb.node_padded, 0, L * B), shard = part(nb.node_part, 0, B);
  Kokkos::deep_copy(part(padded, 0, n), v);
  if (L * B > n) Kokkos::deep_copy(part(padded, n, L * B - n), 0.0f);
  // The shard's residual sits at its elements' places, [r B, (r + 1) B) of
  // v (the last rank's shard is partly padding, which has none).
  const std::int64_t at = std::min(n, local->rank() * B), owned = std::min(n, at + B) - at;
  View1<float> owed;
  if (residual.extent(0) > 0) owed = part(residual, at, owned);
  const PhiloxKey scatter = next_key(), gather = next_key();  // at launch: program order
  std::vector<std::function<comm::Request()>> stages;
  stages.emplace_back([local, padded, shard] { return local->ireduce_scatter(padded, shard); });
  if (I > 1)
    stages.emplace_back([this, shard, owed, c, scatter, gather] {
      return sparse() ? topk_allreduce(shard, owed, c) : compressed_allreduce(shard, c, scatter, gather);
    });
  stages.emplace_back([local, padded, shard, v, n] {
    auto r = local->iallgather(shard, padded);
    r.then([v, padded, n] { Kokkos::deep_copy(v, part(padded, 0, n)); });
    return r;
  });
  return comm::chain(std::move(stages));
}

comm::Request DataGroup::inter_node_reduce_scatter(const View1<float>& send, const View1<float>& recv, int c,
                                                   const View1<float>& residual) {
  auto& hc = channel(c);
  comm::Communicator* local = hc.local.get();
  const std::int64_t B = std::int64_t(recv.extent(0)), I = hc.inter->size();
  auto& nb = node_buffers(c, 0, I * B);
  // This rank's run of I blocks, summed over the node, then reduce-scattered
  // over the nodes; its residual is at the run's places in send's.
  const auto run = part(nb.node_part, 0, I * B);
  View1<float> owed;
  if (residual.extent(0) > 0) owed = part(residual, local->rank() * I * B, I * B);
  const PhiloxKey key = next_key();
  std::vector<std::function<comm::Request()>> stages;
  stages.emplace_back([local, send, run, recv, I] {
    auto r = local->ireduce_scatter(send, run);
    if (I == 1) r.then([recv, run] { Kokkos::deep_copy(recv, run); });
    return r;
  });
  if (I > 1)
    stages.emplace_back([this, run, recv, owed, c, key] {
      return sparse() ? topk_reduce_scatter(run, recv, owed, c) : compressed_reduce_scatter(run, recv, c, key);
    });
  return comm::chain(std::move(stages));
}

double DataGroup::wire_bytes_allreduce(std::int64_t n) const {
  auto encoded = [this](int p, std::int64_t m) {  // the encoded allreduce of m values over p ranks
    if (p <= 1) return 0.0;
    if (sparse()) return ring_block_bytes(p, topk_.words(m), 4);
    return 2.0 * ring_block_bytes(p, codec_.words((m + p - 1) / p), 4);
  };
  if (!hierarchical()) return encoded(size_, n);
  const int L = hier_[0].local->size(), I = hier_[0].inter->size();
  const std::int64_t B = (n + L - 1) / L;
  return 2.0 * ring_block_bytes(L, B, 4) + encoded(I, B);
}

double DataGroup::wire_bytes_reduce_scatter(std::int64_t block) const {
  auto encoded = [this](int p, std::int64_t b) {
    return ring_block_bytes(p, sparse() ? topk_.words(b) : codec_.words(b), 4);
  };
  if (!hierarchical()) return encoded(size_, block);
  const int L = hier_[0].local->size(), I = hier_[0].inter->size();
  return ring_block_bytes(L, std::int64_t(I) * block, 4) + (I > 1 ? encoded(I, block) : 0.0);
}

comm::HierarchicalComms& DataGroup::channel(int c) {
  EXA_ASSERT(c >= 0 && c < channels_);
  return hier_[static_cast<std::size_t>(c)];
}

std::string DataGroup::describe() const {
  if (hierarchical())
    return fmt::format("hierarchical {} collectives over {} ranks ({} node-local x {} inter-node)",
                       bulk_->backend(), size_, hier_[0].local->size(), hier_[0].inter->size());
  return fmt::format("flat {} collectives over {} ranks", bulk_->backend(), size_);
}

comm::Request DataGroup::iallreduce(const View1<float>& v, int c, const View1<float>& residual) {
  // The buffer's producers must be done before MPI reads it; that wait is
  // compute (on a GPU, the unit's kernels), so it is outside the comm timer.
  Kokkos::fence();
  ScopedRegion region("comm/launch");
  const std::int64_t n = std::int64_t(v.extent(0));
  if (encoded_step()) {
    EXA_ASSERT(!topk_step() || residual.extent(0) == v.extent(0));
    comm::TrafficLedger::add(comm::Traffic::DpGrads, ring_allreduce_bytes(size_, n, 4), wire_bytes_allreduce(n));
    if (hierarchical()) return inter_node_allreduce(v, c, topk_step() ? residual : View1<float>());
    if (topk_step()) return topk_allreduce(v, residual, c);
    const PhiloxKey scatter = next_key(), gather = next_key();  // at launch: program order
    return compressed_allreduce(v, c, scatter, gather);
  }
  const double bytes = ring_allreduce_bytes(size_, n, 4);
  comm::TrafficLedger::add(comm::Traffic::DpGrads, bytes, bytes);
  if (hierarchical()) return comm::ihierarchical_allreduce(channel(c), v);
  return bulk_->iallreduce(v);
}

comm::Request DataGroup::ireduce_scatter(const View1<float>& send, const View1<float>& recv, int c,
                                         const View1<float>& residual) {
  EXA_ASSERT(send.extent(0) == recv.extent(0) * std::size_t(size_));
  Kokkos::fence();
  ScopedRegion region("comm/launch");
  const std::int64_t B = std::int64_t(recv.extent(0));
  if (encoded_step()) {
    EXA_ASSERT(!topk_step() || residual.extent(0) == send.extent(0));
    comm::TrafficLedger::add(comm::Traffic::DpGrads, ring_block_bytes(size_, B, 4), wire_bytes_reduce_scatter(B));
    if (hierarchical()) return inter_node_reduce_scatter(send, recv, c, topk_step() ? residual : View1<float>());
    if (topk_step()) return topk_reduce_scatter(send, recv, residual, c);
    return compressed_reduce_scatter(send, recv, c, next_key());
  }
  const double bytes = ring_block_bytes(size_, B, 4);
  comm::TrafficLedger::add(comm::Traffic::DpGrads, bytes, bytes);
  if (hierarchical()) return comm::ihierarchical_reduce_scatter(*channel(c).local, *channel(c).inter, send, recv);
  return bulk_->ireduce_scatter(send, recv);
}

comm::Request DataGroup::iallgather(const View1<float>& send, const View1<float>& recv, int c) {
  EXA_ASSERT(recv.extent(0) == send.extent(0) * std::size_t(size_));
  Kokkos::fence();
  ScopedRegion region("comm/launch");
  const std::int64_t B = std::int64_t(send.extent(0));
  const double bytes = ring_block_bytes(size_, B, 4);
  if (weights_compressed() && size_ > 1) {
    if (hierarchical() && inter_node_only_) return inter_node_allgather(send, recv, c);
    comm::TrafficLedger::add(comm::Traffic::ZeroWeights, bytes, ring_block_bytes(size_, weight_codec_.words(B), 4));
    return compressed_allgather(send, recv, c);
  }
  comm::TrafficLedger::add(comm::Traffic::ZeroWeights, bytes, bytes);
  if (hierarchical()) return comm::ihierarchical_allgather(*channel(c).local, *channel(c).inter, send, recv);
  return bulk_->iallgather(send, recv);
}

void DataGroup::wait(comm::Request& r) {
  if (r.done()) return;
  ScopedRegion region("comm/wait");
  r.wait();
}

bool DataGroup::test(comm::Request& r) {
  if (r.done()) return true;
  ScopedRegion region("comm/progress");
  return r.test();
}

double DataGroup::sum(double x) {
  ScopedRegion region("comm/scalar");
  double y = x;
  if (size_ > 1) scalar_->allreduce(&x, &y, 1);
  return y;
}

std::int64_t DataGroup::sum(std::int64_t x) {
  ScopedRegion region("comm/scalar");
  std::int64_t y = x;
  if (size_ > 1) scalar_->allreduce(&x, &y, 1);
  return y;
}

}  // namespace exa::parallel::data
