#pragma once
// DataGroup: the collectives of data parallelism over the ProcessGrid's Data
// group (dp x cp ranks), flat or hierarchical behind one interface, so the
// ZeRO engine does not care which.
//
// Blocks: reduce_scatter and allgather move `parts()` equal blocks; this
// rank's block is block_index() (its Data rank for the flat collectives,
// comm::hierarchical_block_index for the hierarchical ones). ShardLayout
// takes that index as the rank's part.
//
// Every call is nonblocking and returns a comm::Request; the caller decides
// when to wait (overlap) and the DataParallel engine times the waits as
// exposed communication.
//
// Channels. A hierarchical collective is a chain of stages; its later
// stages are posted from test()/wait(). comm/hierarchical.cpp queues the
// stages per communicator so that every rank posts them in the same order,
// which also means a stage waits behind every earlier operation's stages on
// the same communicators. Each channel has its own node-local and
// inter-node communicators, so operations on different channels (a unit's
// gather and another's reduce-scatter) do not queue behind each other. The
// caller keeps one operation in flight per channel. The flat collectives
// are one MPI call each and share one communicator.
//
// Views are float buffers in the execution space's memory (staged through
// host by the MPI backend when that is a GPU).
//
// Compression (comm.compression = bf16 | int8, flat collectives only): the
// gradient collectives move encoded payloads (kernels/wire_codec.hpp) and
// sum in fp32. A reduce-scatter is an all-to-all of each destination's
// encoded block, decoded and summed in rank order on arrival, so the
// quantization error does not compound over hops (ZeRO++'s qgZ); an
// allreduce is that reduce-scatter followed by an allgather of the encoded
// sums, which every rank decodes alike (all ranks end with the same
// values). Each channel then has a communicator of its own, since the
// second stage is posted when the first is found complete.
//
// Stochastic rounding (comm.stochastic_rounding, with bf16 or int8
// gradients): every encode of a step draws under its own Philox key, from
// the run's seed, the step (set_step), the group, this rank, the
// collective's number in the step and the destination block, taken when
// the collective is launched (in program order, whatever order the stages
// complete in). A resumed run draws what the uninterrupted one did.
//
// Top-k (comm.compression = topk, kernels/topk_codec.hpp): each rank sends
// the largest comm.topk_ratio of its gradient plus its error-feedback
// residual, and keeps the rest as the new residual (the caller's buffer,
// one element per element sent, per rank). The allreduce is an allgather
// of every rank's (offset, value) payload, added into zeros in rank order
// by every rank alike; the reduce-scatter sends each destination the top-k
// of its block (an all-to-all of equal payloads), added in rank order. The
// first comm.topk_warmup steps (set_step) are dense and uncompressed, and
// leave the residual as it was.
//
// Inter-node only (comm.compress_scope = "inter_node", hierarchical
// collectives; ZeRO++'s hpZ idea): the node-local stages (reduce-scatter,
// allgather) move fp32, and only the inter-node stage is encoded, as the
// flat collectives are: so an allreduce is a node-local reduce-scatter, the
// compressed allreduce of each rank's shard over the inter-node group, and
// a node-local allgather; a reduce-scatter a node-local reduce-scatter of
// this rank's run of inter-node blocks, then the compressed reduce-scatter
// of the run. Top-k's residual of a shard or run is kept at its elements'
// places in the caller's residual (the other places stay zero).
//
// Weight compression (comm.weight_compression = bf16 | int8, ZeRO++'s
// qwZ): the parameter allgathers (ZeRO 3 before use, ZeRO 1/2 after the
// step) send each rank's part encoded, and every rank decodes every part,
// its own too, so the working copies are equal everywhere; the fp32 master
// parts are never quantized. Hierarchical: both stages move the encoded
// parts (compress_scope "all"), or (compress_scope "inter_node") the nodes
// exchange encoded parts, every rank decodes its run of them, and the node
// shares the decoded runs in fp32; on one node nothing is encoded. Every
// collective is counted in comm::TrafficLedger.
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/hierarchical.hpp"
#include "comm/process_grid.hpp"
#include "core/types.hpp"
#include "kernels/topk_codec.hpp"
#include "kernels/wire_codec.hpp"

namespace exa::parallel::data {

class DataGroup {
 public:
  // Collective over the grid's Data group. `hierarchical` throws exa::Error
  // when the nodes hold different numbers of Data ranks.
  // `backend`: the bulk collectives' (scalar sums always use MPI, on host
  // values). Backend::Nccl throws exa::Error naming the fix in a build
  // without NCCL or without a visible GPU.
  // `over`: Group::Data, or Group::ExpertData for the expert tensors under
  // expert parallelism (flat collectives only: `hierarchical` must be false).
  // `codec`: the gradient collectives' wire format, `weight_codec` the
  // parameter allgathers' (F32: uncompressed); compression needs flat
  // collectives (`hierarchical` false) unless `inter_node_only`; the
  // weight gathers compress either way.
  // `inter_node_only` (comm.compress_scope = "inter_node", with
  // `hierarchical`): the gradient collectives and weight gathers encode
  // their inter-node stage only.
  DataGroup(const comm::ProcessGrid& grid, bool hierarchical, int channels = 1,
            comm::Backend backend = comm::Backend::Mpi, comm::Group over = comm::Group::Data,
            kernels::WireCodec codec = {}, kernels::WireCodec weight_codec = {}, kernels::TopkCodec topk = {},
            std::int64_t topk_warmup = 0, bool inter_node_only = false);

  int size() const { return size_; }
  int rank() const { return rank_; }
  int block_index() const { return block_index_; }
  bool hierarchical() const { return !hier_.empty(); }
  bool compressed() const { return codec_.format() != kernels::WireFormat::F32; }
  // Top-k with error feedback: the gradient collectives take a residual.
  bool sparse() const { return topk_.enabled(); }
  bool weights_compressed() const { return weight_codec_.format() != kernels::WireFormat::F32; }
  int channels() const { return channels_; }
  const char* backend() const { return bulk_->backend(); }
  // "flat allreduce over 4 ranks" / "hierarchical: 2 node-local x 2 inter-node".
  std::string describe() const;

  // In place: v <- sum over the group. Under top-k, `residual` (v's
  // extent) is this rank's error feedback for v: added before selecting,
  // left holding what was not sent.
  comm::Request iallreduce(const View1<float>& v, int channel = 0, const View1<float>& residual = {});
  // recv [block] <- sum over the group of send's block block_index();
  // send holds size() * block elements (and residual, under top-k, as many).
  comm::Request ireduce_scatter(const View1<float>& send, const View1<float>& recv, int channel = 0,
                                const View1<float>& residual = {});
  // recv [size() * block] <- every rank's send [block] at its block index.
  comm::Request iallgather(const View1<float>& send, const View1<float>& recv, int channel = 0);

  double sum(double x);
  std::int64_t sum(std::int64_t x);

  // Stochastic rounding's keys from now on: step `step` of the run seeded
  // `seed` (the collectives count from 0 again).
  void set_step(std::uint64_t seed, std::int64_t step);

  // Waiting and polling, charged to the "comm/" phase timers: what a rank
  // spends here (and in the launches above) is its exposed communication.
  // test() is what progresses nonblocking collectives under MPICH between
  // compute phases.
  static void wait(comm::Request& r);
  static bool test(comm::Request& r);

 private:
  comm::HierarchicalComms& channel(int c);
  // A channel's encoded buffers (compression), grown to the largest payload.
  struct Packed {
    View1<std::int32_t> send, recv;
    View1<float> padded, block, decoded;
    View1<float> node_padded, node_part;  // inter-node only: the node-local stages' buffers
  };
  Packed& packed(int c, std::int64_t words, std::int64_t padded, std::int64_t block);
  Packed& node_buffers(int c, std::int64_t padded, std::int64_t part);
  // Encodes send's size() blocks of `block` values and exchanges them over
  // channel c; on completion recv [block] = the decoded sum in rank order.
  comm::Request compressed_reduce_scatter(const View1<float>& send, const View1<float>& recv, int c, PhiloxKey key);
  comm::Request compressed_allreduce(const View1<float>& v, int c, PhiloxKey scatter, PhiloxKey gather);
  // The communicator the encoded stages run over: the channel's own flat
  // one, or (inter-node only) its inter-node one.
  comm::Communicator& wire(int c);
  // The all-to-all of the channel's packed send buffer, W words to each
  // rank of wire(c), into its packed receive buffer.
  comm::Request exchange_blocks(int c, std::int64_t W);
  // Inter-node only: the fp32 node-local stages around the encoded one.
  comm::Request inter_node_allreduce(const View1<float>& v, int c, const View1<float>& residual);
  comm::Request inter_node_reduce_scatter(const View1<float>& send, const View1<float>& recv, int c,
                                          const View1<float>& residual);
  double wire_bytes_allreduce(std::int64_t n) const;  // the ledger's wire bytes of one allreduce / reduce-scatter
  double wire_bytes_reduce_scatter(std::int64_t block) const;
  bool topk_step() const { return sparse() && size_ > 1 && step_ >= topk_warmup_; }
  // The gradient collectives encode this step (top-k past its warm-up, or
  // bf16/int8), rather than moving fp32.
  bool encoded_step() const { return topk_step() || (compressed() && size_ > 1); }
  comm::Request topk_allreduce(const View1<float>& v, const View1<float>& residual, int c);
  comm::Request topk_reduce_scatter(const View1<float>& send, const View1<float>& recv, const View1<float>& residual,
                                    int c);
  // The next collective's stochastic rounding key (zero when it is off).
  PhiloxKey next_key();
  // The weight gathers' encoded parts, over the flat collective or both
  // hierarchical stages; inter_node_allgather encodes the inter-node stage only.
  comm::Request compressed_allgather(const View1<float>& send, const View1<float>& recv, int c);
  comm::Request inter_node_allgather(const View1<float>& send, const View1<float>& recv, int c);

  int size_ = 1, rank_ = 0, block_index_ = 0, channels_ = 1;
  comm::Group over_;
  PhiloxKey rounding_{0, 0};  // from the seed (set_step)
  std::int64_t step_ = 0;
  std::uint32_t calls_ = 0;   // collectives launched in the step
  std::unique_ptr<comm::Communicator> scalar_;  // MPI, host scalars
  std::unique_ptr<comm::Communicator> bulk_;    // flat collectives of the buffers (MPI or NCCL)
  std::vector<comm::HierarchicalComms> hier_;   // one per channel
  kernels::WireCodec codec_, weight_codec_;
  kernels::TopkCodec topk_;
  std::int64_t topk_warmup_ = 0;
  bool inter_node_only_ = false;
  std::vector<std::unique_ptr<comm::Communicator>> chan_;  // compression: one per channel
  std::vector<Packed> packed_;                             // compression: one per channel
};

}  // namespace exa::parallel::data
