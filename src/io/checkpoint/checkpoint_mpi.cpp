// The MPI helpers of the checkpoint library (checkpoint_internal.hpp): a
// string broadcast, every rank agreeing on an error, and chunk sums over ranks.
#include <algorithm>
#include <climits>

#include "comm/mpi_env.hpp"
#include "core/error.hpp"
#include "io/checkpoint/checkpoint_internal.hpp"

namespace exa::io::detail {

void bcast_string(std::string& s, int root, MPI_Comm comm) {
  unsigned long long n = s.size();
  MPI_Bcast(&n, 1, MPI_UNSIGNED_LONG_LONG, root, comm);
  s.resize(static_cast<std::size_t>(n));
  // Chunks below INT_MAX bytes.
  for (std::size_t off = 0; off < s.size(); off += (1u << 30)) {
    const int len = static_cast<int>(std::min<std::size_t>(1u << 30, s.size() - off));
    MPI_Bcast(s.data() + off, len, MPI_CHAR, root, comm);
  }
}

void agree(MPI_Comm comm, const std::string& local_error) {
  const int me = comm_rank(comm);
  int mine = local_error.empty() ? INT_MAX : me, first = INT_MAX;
  MPI_Allreduce(&mine, &first, 1, MPI_INT, MPI_MIN, comm);
  if (first == INT_MAX) return;
  std::string msg = local_error;
  bcast_string(msg, first, comm);
  throw Error(msg);
}

std::vector<std::uint64_t> allreduce_sum(const std::vector<std::uint64_t>& partial, MPI_Comm comm) {
  std::vector<std::uint64_t> total(partial.size(), 0);
  for (std::size_t at = 0; at < partial.size(); at += (1u << 28)) {
    const int n = static_cast<int>(std::min<std::size_t>(1u << 28, partial.size() - at));
    MPI_Allreduce(partial.data() + at, total.data() + at, n, MPI_UINT64_T, MPI_SUM, comm);
  }
  return total;
}

}  // namespace exa::io::detail
