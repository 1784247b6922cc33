#include "comm/node_threads.hpp"

#include <sched.h>

#include <algorithm>

namespace exa::comm {

ThreadSetup probe_node_threads(MPI_Comm world) {
  ThreadSetup s = probe_threads();
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Comm_split_type(world, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node);
  MPI_Comm_size(node, &s.ranks_on_node);
  cpu_set_t mine, all;
  CPU_ZERO(&mine);
  CPU_ZERO(&all);
  // A rank that cannot read its mask contributes none (every rank must join).
  if (sched_getaffinity(0, sizeof(mine), &mine) != 0) CPU_ZERO(&mine);
  MPI_Allreduce(&mine, &all, static_cast<int>(sizeof(cpu_set_t)), MPI_BYTE, MPI_BOR, node);
  s.node_cores = std::max(s.cores_bound, CPU_COUNT(&all));
  MPI_Comm_free(&node);
  return s;
}

}  // namespace exa::comm
