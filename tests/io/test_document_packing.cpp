// Sequence packing (io/document_packing.hpp): every token of the range lands
// in exactly one packed row, documents stay whole unless longer than T, no
// target crosses a document boundary or leaves the range, the packing is
// best fit, and the packed sampler's draws are a pure function of (seed,
// step, sample), like the windows'.
#include <gtest/gtest.h>

#include <algorithm>
#include <cstdint>
#include <memory>
#include <set>
#include <string>
#include <vector>

#include "io/document_packing.hpp"
#include "io/sampler.hpp"
#include "io/token_budget.hpp"

using namespace exa::io;

namespace {

// A text of documents separated by blank lines: document i is lengths[i]
// "letters" and then "\n\n" (the separator belongs to the document before
// it). Letters are 1000 + their position, so every token says where it is
// (4-byte tokens).
struct Text {
  std::shared_ptr<std::vector<unsigned char>> bytes = std::make_shared<std::vector<unsigned char>>();
  std::vector<std::int64_t> starts;
  std::int64_t n = 0;
  void push(std::uint32_t v) {
    for (int k = 0; k < 4; ++k) bytes->push_back(static_cast<unsigned char>(v >> (8 * k)));
    ++n;
  }
  TokenStore store() const {
    return TokenStore(std::shared_ptr<const unsigned char>(bytes, bytes->data()), bytes->data(), 4, n, 1 << 20,
                      "text");
  }
};

Text make_text(const std::vector<int>& lengths) {
  Text t;
  for (int len : lengths) {
    t.starts.push_back(t.n);
    for (int i = 0; i < len; ++i) t.push(std::uint32_t(1000 + t.n));
    t.push('\n');
    t.push('\n');
  }
  return t;
}

struct Rows {
  std::vector<std::int32_t> in, tg, start, end;
  explicit Rows(std::int64_t T) : in(T), tg(T), start(T), end(T) {}
  PackedRows out() { return {in.data(), tg.data(), start.data(), end.data()}; }
};

}  // namespace

TEST(DocumentPacking, TextDocumentsStartAfterBlankLines) {
  const Text t = make_text({5, 3, 12, 1});
  EXPECT_EQ(text_document_starts(t.store()), t.starts);
}

TEST(DocumentPacking, EveryTokenOnceAndNoTargetCrossesADocument) {
  const std::vector<int> lengths{5, 3, 40, 12, 1, 7, 14, 14, 2, 9};
  const Text t = make_text(lengths);
  const TokenStore store = t.store();
  const std::int64_t T = 16, end = store.size() - 3;  // the last document clipped by the range
  const DocumentPacking pack(t.starts, 0, end, T);
  std::vector<int> seen(std::size_t(end), 0);
  std::int64_t valid = 0, filled = 0;
  for (std::int64_t s = 0; s < pack.sequences(); ++s) {
    Rows r(T);
    pack.fill(store, s, r.out());
    std::int64_t n_valid = 0;
    for (std::int64_t i = 0; i < T; ++i) {
      ASSERT_LE(r.start[std::size_t(i)], i);
      ASSERT_GT(r.end[std::size_t(i)], i);
      if (i > 0 && r.start[std::size_t(i)] != r.start[std::size_t(i - 1)])
        ASSERT_EQ(r.start[std::size_t(i)], i) << "a document's rows are contiguous";
      if (r.tg[std::size_t(i)] >= 0) ++n_valid;
    }
    EXPECT_EQ(n_valid, pack.valid_targets(s));
    valid += n_valid;
    // Map each document piece back to the text: its rows are consecutive
    // tokens, and a valid target is the token after its input.
    for (std::int64_t i = 0; i < T;) {
      const std::int64_t n = r.end[std::size_t(i)] - i;
      // The piece's first token says where it starts in the text.
      const std::int32_t first = r.in[std::size_t(i)];
      const std::int64_t at = first >= 1000 ? first - 1000 : -1;
      const bool padding = r.tg[std::size_t(i + n - 1)] < 0 && std::all_of(r.in.begin() + i, r.in.begin() + i + n,
                                                                          [](std::int32_t v) { return v == 0; });
      if (at < 0) {
        ASSERT_TRUE(padding) << "rows " << i << ".." << i + n << " of sequence " << s << " are not from the text";
        i += n;
        continue;
      }
      for (std::int64_t k = 0; k < n; ++k) {
        ASSERT_LT(at + k, end) << "a row past the range";
        ASSERT_EQ(r.in[std::size_t(i + k)], std::int32_t(store.at(at + k)));
        ++seen[std::size_t(at + k)];
        const std::int32_t tgt = r.tg[std::size_t(i + k)];
        if (tgt >= 0) {
          ASSERT_LT(at + k + 1, end) << "a target past the range";
          ASSERT_EQ(tgt, std::int32_t(store.at(at + k + 1)));
          ASSERT_EQ(std::find(t.starts.begin(), t.starts.end(), at + k + 1) == t.starts.end() || k + 1 < n, true)
              << "a target across a document boundary";
        }
      }
      filled += n;
      i += n;
    }
  }
  for (std::int64_t p = 0; p < end; ++p) ASSERT_EQ(seen[std::size_t(p)], 1) << "token " << p;
  EXPECT_EQ(filled, pack.filled_rows());
  EXPECT_EQ(filled, end);
  // Whole documents except the 40-token one: 10 documents, one split.
  EXPECT_EQ(pack.documents(), std::int64_t(lengths.size()));
  EXPECT_EQ(pack.split_documents(), 1);
  // Each document of n tokens (+1 separator byte) gives n valid targets
  // when whole; the split one keeps all but its last.
  EXPECT_EQ(valid, end - pack.documents());
  // Best fit: no two sequences could share one (each pair overfills).
  std::vector<std::int64_t> used;
  for (std::int64_t s = 0; s < pack.sequences(); ++s) {
    Rows r(T);
    pack.fill(store, s, r.out());
    std::int64_t u = T;
    while (u > 0 && r.tg[std::size_t(u - 1)] < 0 && r.in[std::size_t(u - 1)] == 0 &&
           r.start[std::size_t(u - 1)] != 0 && r.end[std::size_t(u - 1)] == T)
      --u;
    used.push_back(u);
  }
  for (std::size_t a = 0; a < used.size(); ++a)
    for (std::size_t b = a + 1; b < used.size(); ++b) EXPECT_GT(used[a] + used[b], T) << a << " and " << b;
}

TEST(DocumentPacking, PackedSamplerIsAPureFunctionOfStepAndSample) {
  std::vector<int> lengths;
  for (int i = 0; i < 300; ++i) lengths.push_back(1 + (i * 37) % 23);
  const Text t = make_text(lengths);
  auto sampler = [&] { return Sampler::packed(Dataset(t.store(), 0.1, 16, 1 << 20), 99, t.starts); };
  const Sampler a = sampler(), b = sampler();
  ASSERT_TRUE(a.packed());
  const Batch x = a.train(3, {4, 6}), y = b.train(3, {4, 6});
  EXPECT_EQ(x.inputs, y.inputs);
  EXPECT_EQ(x.doc_start, y.doc_start);
  // Samples 4..9 drawn as two slices are the same rows.
  const Batch p = a.train(3, {4, 3}), q = a.train(3, {7, 3});
  std::vector<std::int32_t> pq = p.targets;
  pq.insert(pq.end(), q.targets.begin(), q.targets.end());
  EXPECT_EQ(pq, x.targets);
  std::int64_t n = 0;
  for (std::int32_t v : x.targets) n += v >= 0;
  EXPECT_EQ(a.train_counts(3, {4, 6}).targets, n);
  EXPECT_NE(a.train(4, {4, 6}).inputs, x.inputs);
  // Validation: its own packing, sequences in order.
  EXPECT_GT(a.n_val_windows(), 0);
  EXPECT_EQ(a.val({0, 2}).inputs, b.val({0, 2}).inputs);
  EXPECT_TRUE(a.val({0, 1}).packed());
}

TEST(DocumentPacking, UnknownDocumentsModeIsRefused) {
  try {
    parse_documents("whole");
    ADD_FAILURE() << "accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("\"packed\""), std::string::npos) << e.what();
  }
}

// Token budgets (io/token_budget.hpp): each micro-batch is one bucket's
// length, as many sequences as the budget holds, each a whole document
// piece from row 0 then padding; its counts are what its rows hold; the
// draw is a pure function of (seed, step, micro-batch).
TEST(TokenBudget, MicroBatchesFitTheBudgetAndHoldWholePieces) {
  std::vector<int> lengths;
  for (int i = 0; i < 400; ++i) lengths.push_back(1 + (i * 53) % 70);
  const Text t = make_text(lengths);
  const TokenStore store = t.store();
  const std::int64_t T = 64, budget = 200;
  const TokenBudget tb(t.starts, 0, store.size(), T, budget, 5);
  EXPECT_EQ(tb.lengths(), (std::vector<std::int64_t>{64, 32, 16, 8}));
  std::set<std::int64_t> seen_lengths;
  for (std::int64_t step = 0; step < 4; ++step)
    for (std::int64_t m = 0; m < 8; ++m) {
      const BatchCounts c = tb.shape(step, m);
      const Batch b = tb.batch(store, step, m);
      ASSERT_EQ(b.size, c.sequences);
      ASSERT_EQ(b.seq_len, c.rows);
      ASSERT_EQ(c.sequences, budget / c.rows);
      ASSERT_LE(c.cells(), budget);
      seen_lengths.insert(c.rows);
      std::int64_t tokens = 0, targets = 0;
      for (std::int64_t r = 0; r < b.size; ++r) {
        const std::int32_t* in = b.inputs.data() + r * b.seq_len;
        const std::int32_t* tg = b.targets.data() + r * b.seq_len;
        std::int64_t n = 0;
        while (n < b.seq_len && in[n] != 0) ++n;  // tokens are never 0 here; padding is
        ASSERT_GT(n, 0);
        // The shortest bucket that holds it.
        ASSERT_TRUE(n > b.seq_len / 2 || b.seq_len == tb.lengths().back()) << n << " rows in a bucket of " << b.seq_len;
        if (in[0] < 1000) {  // the rest of a split document: its separator bytes only
          ASSERT_LE(n, 2);
          for (std::int64_t k = 0; k < n; ++k) targets += tg[k] >= 0;
          tokens += n;
          continue;
        }
        const std::int64_t at = in[0] - 1000;
        for (std::int64_t k = 0; k < n; ++k) ASSERT_EQ(in[k], std::int32_t(store.at(at + k)));
        for (std::int64_t k = n; k < b.seq_len; ++k) ASSERT_EQ(tg[k], -1);
        for (std::int64_t k = 0; k < n; ++k)
          if (tg[k] >= 0) {
            ASSERT_EQ(tg[k], std::int32_t(store.at(at + k + 1)));
            ++targets;
          }
        tokens += n;
      }
      EXPECT_EQ(tokens, c.tokens);
      EXPECT_EQ(targets, c.targets);
      const Batch again = tb.batch(store, step, m);
      EXPECT_EQ(again.inputs, b.inputs);
    }
  EXPECT_GE(seen_lengths.size(), 3u) << "the draws reach several buckets";
  EXPECT_NE(tb.batch(store, 0, 0).inputs, tb.batch(store, 0, 1).inputs);
}

TEST(TokenBudget, ABudgetBelowTheSequenceIsRefused) {
  const Text t = make_text({5, 7});
  try {
    TokenBudget(t.starts, 0, t.n, 16, 8, 1);
    ADD_FAILURE() << "accepted";
  } catch (const std::exception& e) {
    EXPECT_NE(std::string(e.what()).find("set train.batch_tokens >= 16"), std::string::npos) << e.what();
  }
}
