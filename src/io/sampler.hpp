#pragma once
// Deterministic batches: the data side of the determinism contract (docs/architecture.md, "Parallel layout").
//
// Training sample i of step s is the window of T + 1 tokens starting at
//   offset(seed, s, i) = philox(seed, s, i) mod (n_train - T)
// a pure function of (seed, step, index in the global batch). Step s's global
// batch is therefore the same sequence of samples whatever the layout: a
// data-parallel rank r of dp takes samples [r*B/dp, (r+1)*B/dp), and its
// micro-batches split that slice in order. Nothing is carried from step to
// step, so the data cursor a checkpoint stores is just the next step index
// (plus the seed, and Dataset::tokens().fingerprint() to detect that a
// restart is pointed at different data). Windows are drawn with replacement
// (no epochs): at byte level a corpus holds millions of distinct windows and
// a restart or relayout needs no shuffle state.
//
// Validation windows are fixed: window j starts at n_train + j*T (consecutive,
// their inputs do not overlap), and validation batch k of size B holds
// windows kB .. kB+B-1, wrapping round when the held-out part is exhausted.
#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "io/dataset.hpp"
#include "io/document_packing.hpp"
#include "io/token_budget.hpp"

namespace exa::io {

// A contiguous run of sample indices within a global batch.
struct SampleRange {
  std::int64_t first = 0, count = 0;
};

// Rank `dp_rank`'s slice of a global batch of `global_batch` samples over
// `dp` data-parallel ranks; exa::Error unless dp divides global_batch.
SampleRange dp_slice(std::int64_t global_batch, int dp_rank, int dp);
// Micro-batch `micro` (of `micro_batch` samples) of a rank's slice.
SampleRange micro_slice(const SampleRange& slice, std::int64_t micro, std::int64_t micro_batch);

// Host token batches, row-major [size, seq_len]; the trainer copies them to
// the device. Packed batches (data.documents = "packed") also carry each
// row's document, as the first row of it and one past its last
// (document_packing.hpp); both are empty otherwise.
struct Batch {
  std::int64_t size = 0, seq_len = 0;
  std::vector<std::int32_t> inputs, targets;
  std::vector<std::int32_t> doc_start, doc_end;
  bool packed() const { return !doc_start.empty(); }
};

// data.documents: "concat" reads windows across document boundaries;
// "packed" packs whole documents (document_packing.hpp).
enum class Documents { concat, packed };
Documents parse_documents(const std::string& name);

class Sampler {
 public:
  Sampler(Dataset data, std::uint64_t seed);
  // Packed sequences: the documents starting at `doc_starts` (increasing,
  // the first 0) packed within the training and the validation split. A
  // training sample is then a packed sequence drawn as a window is (the
  // same philox draw, modulo the number of sequences); validation batches
  // take the validation split's sequences in order.
  static Sampler packed(Dataset data, std::uint64_t seed, const std::vector<std::int64_t>& doc_starts);

  // Token-budget micro-batches (token_budget.hpp) of the training split's
  // documents; validation stays windows of seq_len.
  static Sampler budgeted(Dataset data, std::uint64_t seed, const std::vector<std::int64_t>& doc_starts,
                          std::int64_t batch_tokens);

  const Dataset& data() const { return data_; }
  std::uint64_t seed() const { return seed_; }
  bool packed() const { return train_pack_ != nullptr; }
  // Token-budget mode: micro-batch m of step s (its own B and T).
  const TokenBudget* budget() const { return budget_.get(); }
  Batch train_micro(std::int64_t step, std::int64_t m) const;
  // The packings (null when not packed).
  const DocumentPacking* train_packing() const { return train_pack_.get(); }
  const DocumentPacking* val_packing() const { return val_pack_.get(); }
  // The sizes of training samples `samples` of step `step` (windows or
  // packed sequences): rows, tokens, and the targets that count in the loss.
  BatchCounts train_counts(std::int64_t step, SampleRange samples) const;

  // Start of training sample `sample` of step `step`'s global batch.
  std::int64_t train_offset(std::int64_t step, std::int64_t sample) const;
  // Training samples `samples` of step `step`.
  Batch train(std::int64_t step, SampleRange samples) const;
  Batch train_batch(std::int64_t step, std::int64_t global_batch, int dp_rank, int dp) const {
    return train(step, dp_slice(global_batch, dp_rank, dp));
  }

  // Number of distinct validation windows (0 without a validation split).
  std::int64_t n_val_windows() const;
  std::int64_t val_offset(std::int64_t sample) const;
  // Validation samples `samples` (indices into the fixed validation sequence).
  Batch val(SampleRange samples) const;
  // Rank `dp_rank`'s slice of validation batch `index` of `global_batch` samples.
  Batch val_batch(std::int64_t index, std::int64_t global_batch, int dp_rank, int dp) const;

 private:
  Dataset data_;
  std::uint64_t seed_;
  std::shared_ptr<const DocumentPacking> train_pack_, val_pack_;
  std::shared_ptr<const TokenBudget> budget_;
  std::uint64_t train_draw(std::int64_t step, std::int64_t sample) const;
  Batch packed_batch(const DocumentPacking& pack, std::int64_t count,
                     const std::function<std::int64_t(std::int64_t)>& sequence) const;
};

}  // namespace exa::io
