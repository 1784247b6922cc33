#include "parallel/expert/expert_exchange.hpp"

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
