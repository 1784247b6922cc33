#pragma once
// The bookkeeping of one expert-parallel all-to-all (docs/architecture.md,
// "Expert parallelism"): from the rows each rank sends to each expert of
// the group, what every rank receives and in which order its experts need
// the rows. Host-side and small (P*El counts); the dispatcher copies the two
// row maps to the device.
#include <cstdint>
#include <vector>

#include "core/types.hpp"

namespace exa::parallel::expert {

struct ExchangePlan {
  std::vector<int> send_rows, recv_rows;  // [P] rows to / from each rank
  std::vector<index_t> expert_offsets;    // [El+1] first expert-major row of each local expert
  // Over the R received rows: expert-major row i is source-major row
  // expert_row[i]; source-major row j is expert-major row source_row[j].
  std::vector<int> expert_row, source_row;
  index_t received = 0;  // R
};

// `send_counts` [P*El]: rows this rank sends to global expert g of the group
// (expert g lives on rank g / El); `recv_counts` [P*El]: rows source s sent
// for local expert e at [s*El + e]. exa::Error when a count is negative or
// the rows exceed what int32 displacements can address with `row_width`
// elements per row.
ExchangePlan plan_exchange(const std::vector<std::int64_t>& send_counts, const std::vector<std::int64_t>& recv_counts,
                           int ranks, int local_experts, std::int64_t row_width);

// moe.a2a_chunks: the exchange cut into `chunks` parts that travel and are
// computed one after another. Part c of the rows between two ranks is rows
// [n c / C, n (c + 1) / C) of their block (which is ordered by the
// receiver's local expert), so sender and receiver cut alike from the
// counts both hold. Each part has a plan of its own over its rows (the
// plan's expert_row, source_row and expert_offsets are relative to the
// part's first received row, `first`), and the row within this rank's
// permuted rows where each destination's part starts (`send_at`).
struct ChunkPlan {
  ExchangePlan plan;
  std::vector<int> send_at;  // [P] first permuted row sent to each rank in this part
  std::vector<int> recv_at;  // [P] first row (of R, source-major) received from each rank
  index_t first = 0;         // the part's first received row (of R)
};
std::vector<ChunkPlan> plan_chunks(const std::vector<std::int64_t>& send_counts,
                                   const std::vector<std::int64_t>& recv_counts, int ranks, int local_experts,
                                   std::int64_t row_width, int chunks);

// Element counts and displacements of an all-to-all-v of `rows` per rank with
// `row_width` elements per row.
struct RowMessages {
  std::vector<int> counts, displs;
};
RowMessages row_messages(const std::vector<int>& rows, std::int64_t row_width);

}  // namespace exa::parallel::expert
