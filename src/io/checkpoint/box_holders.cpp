#include "io/checkpoint/box_holders.hpp"

#include <algorithm>
#include <map>

#include "comm/mpi_env.hpp"
#include "kernels/checksum.hpp"

namespace exa::io {

std::vector<BoxHolders> box_holders(const std::vector<std::optional<model::Box>>& boxes, MPI_Comm comm) {
  const std::size_t T = boxes.size();
  const int P = comm_size(comm), me = comm_rank(comm);
  // A box's signature (0: holds none).
  std::vector<std::uint64_t> mine(T, 0), all(T * std::size_t(P));
  for (std::size_t t = 0; t < T; ++t) {
    if (!boxes[t]) continue;
    const std::uint64_t sig = kernels::checksum_leaf(model::box_str(*boxes[t]), boxes[t]->numel());
    mine[t] = sig == 0 ? 1 : sig;
  }
  if (T > 0) MPI_Allgather(mine.data(), int(T), MPI_UINT64_T, all.data(), int(T), MPI_UINT64_T, comm);
  std::vector<BoxHolders> out(T);
  for (std::size_t t = 0; t < T; ++t) {
    std::map<std::uint64_t, std::int64_t> count;  // holders of each box
    std::int64_t before = 0;
    for (int r = 0; r < P; ++r) {
      const std::uint64_t sig = all[std::size_t(r) * T + t];
      if (sig == 0) continue;
      ++count[sig];
      if (r < me && sig == mine[t]) ++before;
    }
    auto& h = out[t];
    if (mine[t] != 0) {
      h.holder = before;
      h.holders = count.at(mine[t]);
    }
    for (const auto& [sig, c] : count) {
      h.fewest = h.fewest == 0 ? c : std::min(h.fewest, c);
      h.most = std::max(h.most, c);
    }
  }
  return out;
}

}  // namespace exa::io
