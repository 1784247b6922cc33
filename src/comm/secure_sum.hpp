#pragma once
// Sums of 32-bit fixed-point vectors (comm/fixed_point.hpp) over a group of
// parties, one per federated site, at the group's rank 0 (the aggregator),
// the sum then broadcast to every party: plainly, or by secure aggregation
// (comm/secure_aggregation.hpp) so that the aggregator sees only masked
// vectors. A party may drop out of a round after the key exchange (`drop`:
// federated.drop simulates it, since MPI cannot lose a rank and go on): it
// sends no vector and no unmask shares, the sum is over the others, and
// every party, the dropped one too, gets that sum and who was in it.
#include <mpi.h>

#include <cstdint>
#include <vector>

namespace exa::comm {

struct SecureSumOptions {
  bool secure = false;
  int threshold = 1;        // secure: survivors needed to unmask
  std::uint64_t round = 0;  // secure: the mask streams' nonce
  bool drop = false;        // this party drops out after the key exchange
};

struct SecureSumResult {
  std::vector<char> kept;       // per party: in the sum
  std::int64_t bytes_sent = 0;  // by this party, every message of the round
  std::int64_t bytes_received = 0;
};

// x: this party's vector (n values, the same n on every party); on return,
// the sum over the kept parties mod 2^32.
SecureSumResult secure_sum(MPI_Comm group, std::vector<std::uint32_t>& x, const SecureSumOptions& opt);

}  // namespace exa::comm
