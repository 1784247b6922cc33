#include "comm/hierarchical.hpp"

#include <cstdint>
#include <cstring>
#include <utility>
#include <vector>

#include "comm/hierarchical_stages.hpp"
#include "comm/mpi_env.hpp"
#include "core/error.hpp"
#include "core/types.hpp"

namespace exa::comm {

using namespace hier;

namespace {

// Byte ranges [a, a+na) and [b, b+nb) share memory.
bool overlaps(const void* a, std::size_t na, const void* b, std::size_t nb) {
  const auto x = reinterpret_cast<std::uintptr_t>(a), y = reinterpret_cast<std::uintptr_t>(b);
  return x < y + nb && y < x + na;
}

}  // namespace

Request ihierarchical_allreduce(Communicator& local, Communicator& inter, const void* send, void* recv,
                                std::size_t count, DType t, ReduceOp op) {
  EXA_REQUIRE(local.device_memory() == inter.device_memory(),
              "hierarchical_allreduce: node-local ({}) and inter-node ({}) communicators use different memory",
              local.backend(), inter.backend());
  if (count == 0) return Request();
  const std::size_t L = static_cast<std::size_t>(local.size());
  Communicator* lp = &local;
  Communicator* ip = &inter;
  if (L == 1) return sequenced({{ip, [=]() { return ip->iallreduce(send, recv, count, t, op); }}});
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

  std::vector<Post> stages;
  stages.emplace_back(lp, [=]() { return lp->ireduce_scatter(buf, shard, block, t, op); });
  if (inter.size() > 1) stages.emplace_back(ip, [=]() { return ip->iallreduce(shard, shard, block, t, op); });
  stages.emplace_back(lp, [=]() { return lp->iallgather(shard, buf, block, t); });
  Request r = sequenced(std::move(stages));
  r.keep(shard_hold);
  if (pad_hold) {
    r.keep(pad_hold);
    r.then([lp, out, buf, bytes = count * es]() { copy(*lp, out, buf, bytes); });
  }
  return r;
}

std::size_t hierarchical_block_index(const Communicator& local, const Communicator& inter) {
  return static_cast<std::size_t>(local.rank()) * static_cast<std::size_t>(inter.size()) +
         static_cast<std::size_t>(inter.rank());
}

Request ihierarchical_reduce_scatter(Communicator& local, Communicator& inter, const void* send, void* recv,
                                     std::size_t block, DType t, ReduceOp op) {
  require_same_memory(local, inter, "hierarchical_reduce_scatter");
  if (block == 0) return Request();
  const std::size_t L = static_cast<std::size_t>(local.size()), I = static_cast<std::size_t>(inter.size());
  const std::size_t es = dtype_size(t), bytes = block * es;
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  const std::size_t index = hierarchical_block_index(local, inter);
  const bool in_place = out == in + index * bytes;
  EXA_REQUIRE(in_place || !overlaps(in, L * I * bytes, out, bytes),
              "hierarchical_reduce_scatter: recv overlaps send but is not this rank's own block of it "
              "(element {} = hierarchical_block_index * block); pass a separate buffer or exactly that block",
              index * block);

  if (L == 1 || I == 1) {
    // One stage: with one side of size 1 the other's rank order is the block index.
    Communicator* cp = L == 1 ? &inter : &local;
    if (!in_place) return sequenced({{cp, [=]() { return cp->ireduce_scatter(send, recv, block, t, op); }}});
    // The backends' reduce-scatter does not take recv inside send (MPI forbids
    // the aliasing): reduce into scratch and copy the block back.
    char* tmp = nullptr;
    Bytes hold = scratch(*cp, bytes, &tmp);
    Request r = sequenced({{cp, [=]() { return cp->ireduce_scatter(send, tmp, block, t, op); }}});
    r.keep(hold);
    r.then([cp, out, tmp, bytes]() { copy(*cp, out, tmp, bytes); });
    return r;
  }

  // The run of I blocks this local rank reduces over the node. recv cannot
  // serve (it holds one block) and send is read-only, hence scratch; recv may
  // alias send because stage 1 has finished reading send when stage 2 writes.
  char* run = nullptr;
  Bytes run_hold = scratch(local, I * bytes, &run);
  Communicator* lp = &local;
  Communicator* ip = &inter;
  std::vector<Post> stages;
  stages.emplace_back(lp, [=]() { return lp->ireduce_scatter(send, run, I * block, t, op); });
  stages.emplace_back(ip, [=]() { return ip->ireduce_scatter(run, recv, block, t, op); });
  Request r = sequenced(std::move(stages));
  r.keep(run_hold);
  return r;
}

Request ihierarchical_allgather(Communicator& local, Communicator& inter, const void* send, void* recv,
                                std::size_t block, DType t) {
  require_same_memory(local, inter, "hierarchical_allgather");
  if (block == 0) return Request();
  const std::size_t L = static_cast<std::size_t>(local.size()), I = static_cast<std::size_t>(inter.size());
  const std::size_t es = dtype_size(t), bytes = block * es;
  const char* in = static_cast<const char*>(send);
  char* out = static_cast<char*>(recv);
  const std::size_t index = hierarchical_block_index(local, inter);
  EXA_REQUIRE(in == out + index * bytes || !overlaps(in, bytes, out, L * I * bytes),
              "hierarchical_allgather: send lies inside recv but is not this rank's own block of it "
              "(element {} = hierarchical_block_index * block); pass a separate buffer or exactly that block",
              index * block);
  Communicator* lp = &local;
  Communicator* ip = &inter;
  if (L == 1 || I == 1) {
    Communicator* cp = L == 1 ? ip : lp;
    return sequenced({{cp, [=]() { return cp->iallgather(send, recv, block, t); }}});
  }

  // This local rank's run of I blocks has its final place in recv, so the
  // inter-node stage gathers straight into it and the node-local stage runs
  // in place: no scratch and no copies. A send that is already this rank's
  // block of recv is also that stage's in-place case.
  char* run = out + static_cast<std::size_t>(local.rank()) * I * bytes;
  std::vector<Post> stages;
  stages.emplace_back(ip, [=]() { return ip->iallgather(send, run, block, t); });
  stages.emplace_back(lp, [=]() { return lp->iallgather(run, recv, I * block, t); });
  return sequenced(std::move(stages));
}

namespace {

// Fills hc.flat_rank and hc.nodes_aligned from the ranks of the flat group
// (collective over it).
void map_flat_ranks(HierarchicalComms& hc, MPI_Comm flat, MPI_Comm local, MPI_Comm inter) {
  const int L = comm_size(local), inter_rank = comm_rank(inter);
  std::vector<int> node_inter(static_cast<std::size_t>(L));
  MPI_Allgather(&inter_rank, 1, MPI_INT, node_inter.data(), 1, MPI_INT, local);
  int aligned = 1;
  for (int r : node_inter) aligned = aligned && r == inter_rank;
  MPI_Allreduce(MPI_IN_PLACE, &aligned, 1, MPI_INT, MPI_LAND, flat);
  hc.nodes_aligned = aligned != 0;

  const int P = comm_size(flat), index = inter_rank * L + comm_rank(local);
  std::vector<int> index_of(static_cast<std::size_t>(P));
  MPI_Allgather(&index, 1, MPI_INT, index_of.data(), 1, MPI_INT, flat);
  bool identity = true;
  hc.flat_rank.assign(static_cast<std::size_t>(P), -1);
  for (int q = 0; q < P; ++q) {
    hc.flat_rank[static_cast<std::size_t>(index_of[static_cast<std::size_t>(q)])] = q;
    identity = identity && index_of[static_cast<std::size_t>(q)] == q;
  }
  if (identity) hc.flat_rank.clear();
}

}  // namespace

HierarchicalComms make_hierarchical(const ProcessGrid& grid, Group over, Backend backend) {
  EXA_REQUIRE(over == Group::World || over == Group::Data || over == Group::Ep,
              "make_hierarchical: hierarchical collectives run over Group::World, Group::Data or Group::Ep, not {}",
              group_name(over));
  Group local_group = Group::NodeLocal, inter_group = Group::InterNode;
  bool uniform = grid.nodes_uniform();
  const char* off_switch = "parallel.hierarchical = false";
  if (over == Group::Data) {
    local_group = Group::DataNodeLocal, inter_group = Group::DataInterNode;
    uniform = grid.data_nodes_uniform();
  } else if (over == Group::Ep) {
    local_group = Group::EpNodeLocal, inter_group = Group::EpInterNode;
    uniform = grid.ep_nodes_uniform();
    off_switch = "comm.hierarchical_a2a = false";
  }
  EXA_REQUIRE(uniform,
              "hierarchical collectives over the {} group need the same number of its ranks on every node "
              "({}); set {} or parallel.ranks_per_node to pretend even nodes",
              group_name(over), grid.describe(), off_switch);
  MPI_Comm lc = grid.comm(local_group);
  MPI_Comm ic = grid.comm(inter_group);
  HierarchicalComms hc;
  hc.local = make_transport(lc, backend);
  hc.inter = make_transport(ic, backend);
  map_flat_ranks(hc, grid.comm(over), lc, ic);
  return hc;
}

}  // namespace exa::comm
