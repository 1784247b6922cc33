#include "comm/hierarchical.hpp"

#include <cstring>

#include "core/error.hpp"
#include "core/types.hpp"

namespace exa::comm {

namespace {

using Bytes = std::shared_ptr<void>;

// `bytes` of scratch in the memory `c` reads.
Bytes scratch(const Communicator& c, std::size_t bytes, char** ptr) {
  if (c.device_memory()) {
    auto v = std::make_shared<Kokkos::View<char*, exa::MemSpace>>(
        Kokkos::view_alloc(Kokkos::WithoutInitializing, "exa::comm::hier"), bytes);
    *ptr = v->data();
    return v;
  }
  auto v = std::make_shared<Kokkos::View<char*, Kokkos::HostSpace>>(
      Kokkos::view_alloc(Kokkos::WithoutInitializing, "exa::comm::hier"), bytes);
  *ptr = v->data();
  return v;
}

template <class Space>
using Raw = Kokkos::View<char*, Space, Kokkos::MemoryTraits<Kokkos::Unmanaged>>;

void copy(const Communicator& c, char* dst, const char* src, std::size_t bytes) {
  if (bytes == 0 || dst == src) return;
  if (c.device_memory()) {
    Kokkos::deep_copy(Raw<exa::MemSpace>(dst, bytes), Raw<exa::MemSpace>(const_cast<char*>(src), bytes));
  } else {
    std::memcpy(dst, src, bytes);
  }
}

void zero(const Communicator& c, char* dst, std::size_t bytes) {
  if (bytes == 0) return;
  if (c.device_memory()) {
    Kokkos::deep_copy(Raw<exa::MemSpace>(dst, bytes), char(0));
  } else {
    std::memset(dst, 0, bytes);
  }
}

}  // namespace

Request ihierarchical_allreduce(Communicator& local, Communicator& inter, const void* send, void* recv,
                                std::size_t count, DType t, ReduceOp op) {
  EXA_REQUIRE(local.device_memory() == inter.device_memory(),
              "hierarchical_allreduce: node-local ({}) and inter-node ({}) communicators use different memory",
              local.backend(), inter.backend());
  if (count == 0) return Request();
  const std::size_t L = static_cast<std::size_t>(local.size());
  if (L == 1) return inter.iallreduce(send, recv, count, t, op);
  const std::size_t es = dtype_size(t);
  char* out = static_cast<char*>(recv);
  copy(local, out, static_cast<const char*>(send), count * es);

  const std::size_t block = (count + L - 1) / L, padded = block * L;
  char* buf = out;  // padded working buffer: recv itself when count divides evenly
  Bytes pad_hold;
  if (padded != count) {
    pad_hold = scratch(local, padded * es, &buf);
    copy(local, buf, out, count * es);
    zero(local, buf + count * es, (padded - count) * es);
  }
  char* shard = nullptr;
  Bytes shard_hold = scratch(local, block * es, &shard);

  Communicator* lp = &local;
  Communicator* ip = &inter;
  std::vector<std::function<Request()>> stages;
  stages.emplace_back([=]() { return lp->ireduce_scatter(buf, shard, block, t, op); });
  if (inter.size() > 1) stages.emplace_back([=]() { return ip->iallreduce(shard, shard, block, t, op); });
  stages.emplace_back([=]() { return lp->iallgather(shard, buf, block, t); });
  Request r = chain(std::move(stages));
  r.keep(shard_hold);
  if (pad_hold) {
    r.keep(pad_hold);
    r.then([lp, out, buf, bytes = count * es]() { copy(*lp, out, buf, bytes); });
  }
  return r;
}

HierarchicalComms make_hierarchical(const ProcessGrid& grid, Group over, Backend backend) {
  EXA_REQUIRE(over == Group::World || over == Group::Data,
              "make_hierarchical: hierarchical collectives run over Group::World or Group::Data, not {}",
              group_name(over));
  const bool world = over == Group::World;
  EXA_REQUIRE(world ? grid.nodes_uniform() : grid.data_nodes_uniform(),
              "hierarchical collectives over the {} group need the same number of its ranks on every node "
              "({}); set parallel.hierarchical = false or parallel.ranks_per_node to pretend even nodes",
              group_name(over), grid.describe());
  MPI_Comm lc = grid.comm(world ? Group::NodeLocal : Group::DataNodeLocal);
  MPI_Comm ic = grid.comm(world ? Group::InterNode : Group::DataInterNode);
  HierarchicalComms hc;
  if (backend == Backend::Nccl) {
    hc.local = make_nccl_communicator(lc);
    hc.inter = make_nccl_communicator(ic);
  } else {
    hc.local = make_mpi_communicator(lc);
    hc.inter = make_mpi_communicator(ic);
  }
  return hc;
}

}  // namespace exa::comm
