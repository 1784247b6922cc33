#pragma once
// Hierarchical collectives over (node-local, inter-node) communicator pairs;
// reduce-scatter and allgather for sharded data parallelism further down, the
// all-to-all-v of expert parallelism in comm/hierarchical_alltoallv.hpp.
//
// Hierarchical allreduce: node-local reduce-scatter, inter-node allreduce of
// each rank's shard, node-local allgather. Inter-node traffic per rank drops
// to 1/ranks_per_node of the message; the node-local steps stay in shared
// memory (or NVLink with NCCL).
//
//   auto hc = exa::comm::make_hierarchical(grid, Group::Data);   // or Group::World
//   exa::comm::hierarchical_allreduce(hc, grads);                // == flat allreduce over the group
//
// Counts not divisible by the node-local size are padded to the next
// multiple (the padding never reaches the result). The node-local groups
// must all have the same size (ProcessGrid::nodes_uniform()), so that the
// inter-node groups (same local index on every node) line up.
#include <cstddef>
#include <memory>
#include <stdexcept>
#include <type_traits>
#include <vector>

#include "comm/communicator.hpp"
#include "comm/process_grid.hpp"

namespace exa::comm {

struct HierarchicalComms {
  std::unique_ptr<Communicator> local;  // ranks of one node
  std::unique_ptr<Communicator> inter;  // same local index, one per node
  // flat_rank[inter.rank() * local.size() + local.rank()] = that rank's rank
  // in the group the pair was made from; empty when the two are equal (the
  // group lists its ranks node by node, as ProcessGrid's groups do with
  // pretend nodes or nodes of consecutive ranks).
  std::vector<int> flat_rank;
  // Every node's ranks have the same inter.rank(), i.e. all inter-node groups
  // list the nodes in one order. hierarchical_alltoallv needs it (Group::Ep
  // always has it; World / Data lack it only with detected nodes whose ranks
  // are interleaved).
  bool nodes_aligned = true;
};

// Over Group::World uses (NodeLocal, InterNode); over Group::Data uses
// (DataNodeLocal, DataInterNode); over Group::Ep (EpNodeLocal, EpInterNode).
// Collective over the grid. Throws exa::Error when the nodes hold different
// numbers of the group's ranks.
HierarchicalComms make_hierarchical(const ProcessGrid& grid, Group over = Group::World,
                                    Backend backend = Backend::Mpi);

// Raw form: `send` and `recv` (count elements; send == recv is in place) in
// the communicators' memory (device_memory()).
Request ihierarchical_allreduce(Communicator& local, Communicator& inter, const void* send, void* recv,
                                std::size_t count, DType t, ReduceOp op = ReduceOp::Sum);

// In place on a View; stages it once when it is not in the backend's memory.
template <class T, class... P>
Request ihierarchical_allreduce(Communicator& local, Communicator& inter, const Kokkos::View<T*, P...>& v,
                                ReduceOp op = ReduceOp::Sum) {
  static_assert(!std::is_const_v<T>, "hierarchical_allreduce works in place: the View must be writable");
  auto s = detail::stage(local, v, true, true);
  Request r = ihierarchical_allreduce(local, inter, s.ptr, s.ptr, v.extent(0), dtype_of<T>(), op);
  return detail::finish(std::move(r), s);
}
template <class T, class... P>
void hierarchical_allreduce(Communicator& local, Communicator& inter, const Kokkos::View<T*, P...>& v,
                            ReduceOp op = ReduceOp::Sum) {
  ihierarchical_allreduce(local, inter, v, op).wait();
}
template <class T, class... P>
Request ihierarchical_allreduce(HierarchicalComms& hc, const Kokkos::View<T*, P...>& v,
                                ReduceOp op = ReduceOp::Sum) {
  return ihierarchical_allreduce(*hc.local, *hc.inter, v, op);
}
template <class T, class... P>
void hierarchical_allreduce(HierarchicalComms& hc, const Kokkos::View<T*, P...>& v, ReduceOp op = ReduceOp::Sum) {
  ihierarchical_allreduce(*hc.local, *hc.inter, v, op).wait();
}

// ---------------------------------------------------------------------------
// Sharded data parallelism (ZeRO-2/3): reduce-scatter and allgather of a flat
// buffer of P = local.size() * inter.size() blocks of `block` elements.
//
// The block a rank owns is not its rank in the flat group but
//   hierarchical_block_index = local.rank() * inter.size() + inter.rank(),
// the order in which both stages move contiguous memory and the allgather
// needs no scratch at all:
//   reduce-scatter: node-local reduce-scatter in runs of inter.size() blocks
//     (local rank l gets blocks l*I .. l*I+I-1 summed over the node), then an
//     inter-node reduce-scatter of that run (node n keeps block l*I+n);
//   allgather: inter-node allgather of the block into its run (in place in
//     recv), then an in-place node-local allgather of the runs.
// With one rank per node or one node only one stage runs. Shard with this
// index whenever the data group's collectives go through these functions.
//
// Progress and ordering (all hierarchical collectives, allreduce included):
// a stage after the first is posted from test() / wait() once the stage
// before has completed, so poll while computing to overlap. Each stage keeps
// its place, on its communicator, in the order the operations were started,
// whatever order they are tested or waited in and whenever their stages
// complete on each rank; any test() / wait() advances all of them. So:
//  - start them in the same order on every rank (as any collective);
//  - while one is in flight, do not call collectives on the same local /
//    inter communicators directly (they would jump that order);
//  - test() or wait() them before blocking in a collective that other ranks
//    reach only after finishing theirs: their later stages need this rank's
//    test() / wait() to be posted.
std::size_t hierarchical_block_index(const Communicator& local, const Communicator& inter);
inline std::size_t hierarchical_block_index(const HierarchicalComms& hc) {
  return hierarchical_block_index(*hc.local, *hc.inter);
}

// Raw forms, buffers in the communicators' memory. reduce_scatter: `send`
// holds P*block elements, `recv` gets `block` elements = the reduction over
// all P ranks of block hierarchical_block_index; recv must not overlap send
// except as exactly this rank's own block of it (in place). allgather: `send`
// holds `block` elements, `recv` P*block (block i from the rank whose index
// is i); send is either outside recv or exactly this rank's block of it.
Request ihierarchical_reduce_scatter(Communicator& local, Communicator& inter, const void* send, void* recv,
                                     std::size_t block, DType t, ReduceOp op = ReduceOp::Sum);
Request ihierarchical_allgather(Communicator& local, Communicator& inter, const void* send, void* recv,
                                std::size_t block, DType t);

// View forms: `send` has P * recv.extent(0) elements (reduce_scatter), `recv`
// P * send.extent(0) (allgather). Views outside the backend's memory are
// staged, and recv is copied back on completion.
template <class S, class... P, class T, class... Q>
Request ihierarchical_reduce_scatter(Communicator& local, Communicator& inter, const Kokkos::View<S*, P...>& send,
                                     const Kokkos::View<T*, Q...>& recv, ReduceOp op = ReduceOp::Sum) {
  static_assert(std::is_same_v<std::remove_const_t<S>, T>,
                "hierarchical_reduce_scatter: send and recv must hold the same type and recv must be writable");
  const std::size_t p = static_cast<std::size_t>(local.size()) * static_cast<std::size_t>(inter.size());
  if (send.extent(0) != p * recv.extent(0)) {
    throw std::invalid_argument("exa::comm::hierarchical_reduce_scatter: send must hold local.size() * "
                                "inter.size() * recv.extent(0) elements; size the shard as send.extent(0) / P");
  }
  auto a = detail::stage(local, send, true, false);
  auto b = detail::stage(local, recv, false, true);
  Request r = ihierarchical_reduce_scatter(local, inter, a.ptr, b.ptr, recv.extent(0), dtype_of<T>(), op);
  r = detail::finish(std::move(r), a);
  return detail::finish(std::move(r), b);
}
template <class S, class... P, class T, class... Q>
Request ihierarchical_allgather(Communicator& local, Communicator& inter, const Kokkos::View<S*, P...>& send,
                                const Kokkos::View<T*, Q...>& recv) {
  static_assert(std::is_same_v<std::remove_const_t<S>, T>,
                "hierarchical_allgather: send and recv must hold the same type and recv must be writable");
  const std::size_t p = static_cast<std::size_t>(local.size()) * static_cast<std::size_t>(inter.size());
  if (recv.extent(0) != p * send.extent(0)) {
    throw std::invalid_argument("exa::comm::hierarchical_allgather: recv must hold local.size() * inter.size() * "
                                "send.extent(0) elements; size the full buffer as P * shard");
  }
  auto a = detail::stage(local, send, true, false);
  auto b = detail::stage(local, recv, false, true);
  Request r = ihierarchical_allgather(local, inter, a.ptr, b.ptr, send.extent(0), dtype_of<T>());
  r = detail::finish(std::move(r), a);
  return detail::finish(std::move(r), b);
}

template <class S, class... P, class T, class... Q>
void hierarchical_reduce_scatter(Communicator& local, Communicator& inter, const Kokkos::View<S*, P...>& send,
                                 const Kokkos::View<T*, Q...>& recv, ReduceOp op = ReduceOp::Sum) {
  ihierarchical_reduce_scatter(local, inter, send, recv, op).wait();
}
template <class S, class... P, class T, class... Q>
void hierarchical_allgather(Communicator& local, Communicator& inter, const Kokkos::View<S*, P...>& send,
                            const Kokkos::View<T*, Q...>& recv) {
  ihierarchical_allgather(local, inter, send, recv).wait();
}
template <class S, class... P, class T, class... Q>
Request ihierarchical_reduce_scatter(HierarchicalComms& hc, const Kokkos::View<S*, P...>& send,
                                     const Kokkos::View<T*, Q...>& recv, ReduceOp op = ReduceOp::Sum) {
  return ihierarchical_reduce_scatter(*hc.local, *hc.inter, send, recv, op);
}
template <class S, class... P, class T, class... Q>
void hierarchical_reduce_scatter(HierarchicalComms& hc, const Kokkos::View<S*, P...>& send,
                                 const Kokkos::View<T*, Q...>& recv, ReduceOp op = ReduceOp::Sum) {
  ihierarchical_reduce_scatter(*hc.local, *hc.inter, send, recv, op).wait();
}
template <class S, class... P, class T, class... Q>
Request ihierarchical_allgather(HierarchicalComms& hc, const Kokkos::View<S*, P...>& send,
                                const Kokkos::View<T*, Q...>& recv) {
  return ihierarchical_allgather(*hc.local, *hc.inter, send, recv);
}
template <class S, class... P, class T, class... Q>
void hierarchical_allgather(HierarchicalComms& hc, const Kokkos::View<S*, P...>& send,
                            const Kokkos::View<T*, Q...>& recv) {
  ihierarchical_allgather(*hc.local, *hc.inter, send, recv).wait();
}

}  // namespace exa::comm
