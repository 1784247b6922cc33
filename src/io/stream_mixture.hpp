#pragma once
// A weighted mixture of data streams ([[data.streams]]; docs/data.md, "Data
// streams"), each its own corpus with its own sampler (windows, packed
// sequences or token budgets) and its own validation split.
//
// Micro-batch m of step s comes whole from one stream, chosen with a
// counter-based draw of (seed, s, m) in proportion to the weights: the
// step's micro-batches are the same in every layout (data-parallel rank r
// runs m in [r A, (r+1) A)), a restart draws them again, and each
// micro-batch has one task (what per-task losses and gradient projection
// need). Within its stream, micro-batch m takes that stream's samples
// [m B, (m+1) B) of step s (or, under token budgets, its micro-batch m).
// One stream is the plain deck's data: the same batches as its sampler.
#include <cstdint>
#include <string>
#include <vector>

#include "io/sampler.hpp"

namespace exa::io {

struct DataStream {
  std::string task;
  double weight = 1;
  Sampler sampler;
};

class StreamMixture {
 public:
  // exa::Error without a stream, or when the weights do not sum to > 0.
  StreamMixture(std::vector<DataStream> streams, std::uint64_t seed);

  std::size_t size() const { return streams_.size(); }
  const DataStream& stream(std::size_t i) const { return streams_[i]; }
  std::uint64_t seed() const { return seed_; }
  // The distinct task names, in first-appearance order, and each stream's.
  const std::vector<std::string>& tasks() const { return tasks_; }
  std::size_t task_of(std::size_t stream) const { return task_of_[stream]; }

  // Gradient projection (train.grad_projection) needs each task's share of
  // a step fixed: after this, micro-batch m belongs to task m mod tasks()
  // and draws its stream among that task's streams by weight.
  void assign_tasks_round_robin() { round_robin_ = true; }
  // A task's share of the weights (what it weighs in the projected sum).
  double task_weight(std::size_t task) const;

  // The stream of micro-batch m of step `step`.
  std::size_t stream_of(std::int64_t step, std::int64_t m) const;
  // Micro-batch m of step `step`: `micro_batch` sequences of its stream
  // (its token-budget micro-batch m under train.batch_tokens).
  Batch micro(std::int64_t step, std::int64_t m, std::int64_t micro_batch) const;
  BatchCounts counts(std::int64_t step, std::int64_t m, std::int64_t micro_batch) const;

 private:
  // Streams to draw among, and the running sums of their weights.
  struct Pool {
    std::vector<std::size_t> streams;
    std::vector<double> cumulative;
  };
  std::vector<DataStream> streams_;
  std::uint64_t seed_;
  std::vector<std::string> tasks_;
  std::vector<std::size_t> task_of_;
  Pool all_;                  // every stream
  std::vector<Pool> by_task_;  // each task's streams (round-robin tasks)
  bool round_robin_ = false;
};

}  // namespace exa::io
