#include "comm/secure_sum.hpp"

#include <algorithm>
#include <cstring>

#include "comm/mpi_env.hpp"
#include "comm/secure_aggregation.hpp"
#include "core/error.hpp"

namespace exa::comm {
namespace {

void check(int rc, const char* what) {
  EXA_REQUIRE(rc == MPI_SUCCESS, "secure_sum: {} failed (MPI error {})", what, rc);
}

// The sum of the kept parties' vectors at rank 0, received one by one in
// rank order (no reduction tree: the aggregator alone sees each vector).
void gather_sum(MPI_Comm g, int rank, int size, std::vector<std::uint32_t>& x, const std::vector<char>& kept,
                SecureSumResult& r) {
  const int n = int(x.size());
  if (rank != 0) {
    if (kept[std::size_t(rank)]) {
      check(MPI_Send(x.data(), n, MPI_UINT32_T, 0, 71, g), "MPI_Send of a vector");
      r.bytes_sent += std::int64_t(n) * 4;
    }
    return;
  }
  if (!kept[0]) std::fill(x.begin(), x.end(), 0u);
  std::vector<std::uint32_t> in(x.size());
  for (int u = 1; u < size; ++u) {
    if (!kept[std::size_t(u)]) continue;
    check(MPI_Recv(in.data(), n, MPI_UINT32_T, u, 71, g, MPI_STATUS_IGNORE), "MPI_Recv of a vector");
    r.bytes_received += std::int64_t(n) * 4;
    for (std::size_t i = 0; i < in.size(); ++i) x[i] += in[i];
  }
}

}  // namespace

SecureSumResult secure_sum(MPI_Comm g, std::vector<std::uint32_t>& x, const SecureSumOptions& opt) {
  const int rank = comm_rank(g), size = comm_size(g);
  const int n = int(x.size());
  SecureSumResult r;
  // Who is in: each party's flag, known to all (a dropped party says so; a
  // real one would time out at the aggregator).
  const char mine = opt.drop ? 0 : 1;
  r.kept.assign(std::size_t(size), 0);
  std::unique_ptr<secagg::Party> party;
  std::vector<secagg::Key> keys(static_cast<std::size_t>(size));
  std::vector<secagg::Share> received(static_cast<std::size_t>(size));
  if (opt.secure) {
    party = std::make_unique<secagg::Party>(rank, size, opt.threshold, opt.round);
    check(MPI_Allgather(party->public_key().data(), 32, MPI_BYTE, keys.data(), 32, MPI_BYTE, g), "key exchange");
    r.bytes_sent += 32;
    r.bytes_received += 32 * (size - 1);
    const auto out = party->shares();
    check(MPI_Alltoall(out.data(), int(sizeof(secagg::Share)), MPI_BYTE, received.data(),
                       int(sizeof(secagg::Share)), MPI_BYTE, g),
          "share exchange");
    r.bytes_sent += std::int64_t(sizeof(secagg::Share)) * (size - 1);
    r.bytes_received += std::int64_t(sizeof(secagg::Share)) * (size - 1);
    if (!opt.drop) party->mask(x.data(), x.size(), keys);
  }
  check(MPI_Allgather(&mine, 1, MPI_CHAR, r.kept.data(), 1, MPI_CHAR, g), "survivor flags");
  gather_sum(g, rank, size, x, r.kept, r);
  if (opt.secure) {
    // Each survivor's unmask shares to the aggregator, then the unmasking.
    std::vector<secagg::Key> mine_shares(static_cast<std::size_t>(size));
    if (!opt.drop) mine_shares = party->unmask_shares(r.kept, received);
    std::vector<secagg::Key> all(rank == 0 ? std::size_t(size) * std::size_t(size) : 0);
    check(MPI_Gather(mine_shares.data(), 32 * size, MPI_BYTE, all.data(), 32 * size, MPI_BYTE, 0, g),
          "unmask shares");
    if (rank != 0 && !opt.drop) r.bytes_sent += 32 * size;
    // A failure (too few survivors) must reach every party, not only the
    // aggregator: the verdict goes out before the sum would.
    char ok = 1;
    std::string why;
    if (rank == 0) {
      std::vector<std::vector<secagg::Key>> shares(static_cast<std::size_t>(size));
      for (int v = 0; v < size; ++v) {
        shares[std::size_t(v)].assign(all.begin() + std::ptrdiff_t(v) * size,
                                      all.begin() + std::ptrdiff_t(v + 1) * size);
        if (v != 0 && r.kept[std::size_t(v)]) r.bytes_received += 32 * size;
      }
      try {
        secagg::unmask(x.data(), x.size(), opt.round, opt.threshold, r.kept, keys, shares);
      } catch (const Error& e) {
        ok = 0;
        why = e.what();
      }
    }
    check(MPI_Bcast(&ok, 1, MPI_CHAR, 0, g), "unmask verdict");
    if (!ok && rank == 0) throw Error(why);
    EXA_REQUIRE(ok, "secure aggregation: the aggregator could not unmask the round's sum: {} of {} sites survived, "
                    "fewer than federated.threshold = {}",
                std::count(r.kept.begin(), r.kept.end(), char(1)), size, opt.threshold);
  }
  check(MPI_Bcast(x.data(), n, MPI_UINT32_T, 0, g), "sum broadcast");
  if (rank != 0) r.bytes_received += std::int64_t(n) * 4;
  else r.bytes_sent += std::int64_t(n) * 4 * (size - 1);
  return r;
}

}  // namespace exa::comm
