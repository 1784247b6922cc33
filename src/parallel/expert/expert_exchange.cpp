#include "parallel/expert/expert_exchange.hpp"

#include <algorithm>
#include <limits>

#include "core/error.hpp"

namespace exa::parallel::expert {

namespace {

void require_addressable(std::int64_t rows, std::int64_t row_width, const char* what) {
  EXA_REQUIRE(rows * row_width <= std::numeric_limits<int>::max(),
              "expert all-to-all: {} {} rows of {} elements exceed the int32 counts of MPI_Alltoallv; use more "
              "micro-batches (train.grad_accum) or a smaller train.micro_batch",
              rows, what, row_width);
}

}  // namespace

ExchangePlan plan_exchange(const std::vector<std::int64_t>& send_counts, const std::vector<std::int64_t>& recv_counts,
                           int ranks, int local_experts, std::int64_t row_width) {
  const std::size_t P = std::size_t(ranks), El = std::size_t(local_experts);
  EXA_REQUIRE(send_counts.size() == P * El && recv_counts.size() == P * El,
              "expert all-to-all: {} send and {} receive counts for {} ranks x {} experts", send_counts.size(),
              recv_counts.size(), P, El);
  ExchangePlan x;
  x.send_rows.assign(P, 0);
  x.recv_rows.assign(P, 0);
  x.expert_offsets.assign(El + 1, 0);
  std::int64_t sent = 0;
  for (std::size_t s = 0; s < P; ++s) {
    for (std::size_t e = 0; e < El; ++e) {
      const std::int64_t out = send_counts[s * El + e], in = recv_counts[s * El + e];
      EXA_REQUIRE(out >= 0 && in >= 0, "expert all-to-all: negative row count ({} sent, {} received)", out, in);
      x.send_rows[s] += int(out);
      x.recv_rows[s] += int(in);
      x.expert_offsets[e + 1] += in;
      sent += out;
    }
  }
  for (std::size_t e = 0; e < El; ++e) x.expert_offsets[e + 1] += x.expert_offsets[e];
  x.received = x.expert_offsets[El];
  require_addressable(sent, row_width, "sent");
  require_addressable(x.received, row_width, "received");
  // Source-major: source s's run, by local expert within it. Expert-major:
  // expert e's run, by source within it (then in the order the source sent).
  x.expert_row.assign(std::size_t(x.received), 0);
  x.source_row.assign(std::size_t(x.received), 0);
  std::vector<index_t> next(x.expert_offsets.begin(), x.expert_offsets.end() - 1);
  index_t j = 0;
  for (std::size_t s = 0; s < P; ++s) {
    for (std::size_t e = 0; e < El; ++e) {
      for (std::int64_t t = 0; t < recv_counts[s * El + e]; ++t, ++j) {
        const index_t i = next[e]++;
        x.expert_row[std::size_t(i)] = int(j);
        x.source_row[std::size_t(j)] = int(i);
      }
    }
  }
  return x;
}

namespace {

// Rows of each (rank, local expert) of one block inside part c of C: the
// block's rows [n c / C, n (c + 1) / C), the block ordered by expert.
std::vector<std::int64_t> part_counts(const std::vector<std::int64_t>& counts, std::size_t P, std::size_t El, int c,
                                      int C) {
  std::vector<std::int64_t> out(P * El, 0);
  for (std::size_t r = 0; r < P; ++r) {
    std::int64_t n = 0;
    for (std::size_t e = 0; e < El; ++e) n += counts[r * El + e];
    const std::int64_t a = n * c / C, b = n * (c + 1) / C;
    std::int64_t at = 0;
    for (std::size_t e = 0; e < El; ++e) {
      const std::int64_t lo = std::max(a, at), hi = std::min(b, at + counts[r * El + e]);
      out[r * El + e] = std::max<std::int64_t>(0, hi - lo);
      at += counts[r * El + e];
    }
  }
  return out;
}

}  // namespace

std::vector<ChunkPlan> plan_chunks(const std::vector<std::int64_t>& send_counts,
                                   const std::vector<std::int64_t>& recv_counts, int ranks, int local_experts,
                                   std::int64_t row_width, int chunks) {
  EXA_REQUIRE(chunks >= 1, "expert all-to-all: {} chunks (moe.a2a_chunks must be at least 1)", chunks);
  const std::size_t P = std::size_t(ranks), El = std::size_t(local_experts);
  // Where each destination's block starts among the permuted rows.
  std::vector<std::int64_t> block(P + 1, 0);
  for (std::size_t r = 0; r < P; ++r) {
    block[r + 1] = block[r];
    for (std::size_t e = 0; e < El; ++e) block[r + 1] += send_counts[r * El + e];
  }
  std::vector<ChunkPlan> out(static_cast<std::size_t>(chunks));
  index_t first = 0;
  for (int c = 0; c < chunks; ++c) {
    auto& k = out[std::size_t(c)];
    k.plan = plan_exchange(part_counts(send_counts, P, El, c, chunks), part_counts(recv_counts, P, El, c, chunks),
                           ranks, local_experts, row_width);
    k.first = first;
    k.send_at.assign(P, 0);
    k.recv_at.assign(P, 0);
    index_t at = first;
    for (std::size_t r = 0; r < P; ++r) {
      k.send_at[r] = int(block[r] + (block[r + 1] - block[r]) * c / chunks);
      k.recv_at[r] = int(at);
      at += k.plan.recv_rows[r];
    }
    first += k.plan.received;
  }
  return out;
}

RowMessages row_messages(const std::vector<int>& rows, std::int64_t row_width) {
  RowMessages m;
  int at = 0;
  for (int r : rows) {
    m.counts.push_back(int(r * row_width));
    m.displs.push_back(at);
    at += int(r * row_width);
  }
  return m;
}

}  // namespace exa::parallel::expert
