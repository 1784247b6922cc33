#pragma once
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
#include <memory>

#include "comm/communicator.hpp"
#include "comm/process_grid.hpp"

namespace exa::comm {

enum class Backend { Mpi, Nccl };

struct HierarchicalComms {
  std::unique_ptr<Communicator> local;  // ranks of one node
  std::unique_ptr<Communicator> inter;  // same local index, one per node
};

// Over Group::World uses (NodeLocal, InterNode); over Group::Data uses
// (DataNodeLocal, DataInterNode). Collective over the grid. Throws
// exa::Error when the nodes hold different numbers of the group's ranks.
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

}  // namespace exa::comm
