#include "io/stream_mixture.hpp"

#include <algorithm>

#include "core/error.hpp"
#include "core/philox.hpp"

namespace exa::io {

StreamMixture::StreamMixture(std::vector<DataStream> streams, std::uint64_t seed)
    : streams_(std::move(streams)), seed_(seed) {
  EXA_REQUIRE(!streams_.empty(), "a data mixture needs at least one stream");
  auto add = [&](Pool& p, std::size_t i) {
    p.streams.push_back(i);
    p.cumulative.push_back((p.cumulative.empty() ? 0.0 : p.cumulative.back()) + streams_[i].weight);
  };
  for (std::size_t i = 0; i < streams_.size(); ++i) {
    const auto& s = streams_[i];
    EXA_REQUIRE(s.weight >= 0, "data stream '{}': weight {} is negative", s.task, s.weight);
    const auto it = std::find(tasks_.begin(), tasks_.end(), s.task);
    task_of_.push_back(std::size_t(it - tasks_.begin()));
    if (it == tasks_.end()) {
      tasks_.push_back(s.task);
      by_task_.emplace_back();
    }
    add(all_, i);
    add(by_task_[task_of_.back()], i);
  }
  EXA_REQUIRE(all_.cumulative.back() > 0,
              "the data streams' weights sum to {}; give at least one stream a weight > 0", all_.cumulative.back());
}

double StreamMixture::task_weight(std::size_t task) const {
  return by_task_[task].cumulative.back() / all_.cumulative.back();
}

std::size_t StreamMixture::stream_of(std::int64_t step, std::int64_t m) const {
  if (streams_.size() == 1) return 0;
  EXA_ASSERT(step >= 0 && m >= 0);
  const PhiloxKey key = philox_key(seed_, "examoe.data.streams");
  const auto s = static_cast<std::uint64_t>(step);
  const PhiloxCounter r = philox4x32(PhiloxCounter{static_cast<std::uint32_t>(m), static_cast<std::uint32_t>(m >> 32),
                                                   static_cast<std::uint32_t>(s), static_cast<std::uint32_t>(s >> 32)},
                                     key);
  // 53 random bits as a uniform in [0, 1).
  const std::uint64_t u = (static_cast<std::uint64_t>(r.c0) | static_cast<std::uint64_t>(r.c1) << 32) >> 11;
  const double x = double(u) * (1.0 / 9007199254740992.0);
  // Among every stream by weight, or among micro-batch m's task's streams.
  const Pool& p = round_robin_ ? by_task_[std::size_t(m % std::int64_t(tasks_.size()))] : all_;
  const double sum = p.cumulative.back();
  if (!(sum > 0)) return p.streams.front();  // a task of weight 0: its first stream
  const double target = x * sum;
  std::size_t i = 0;
  while (i + 1 < p.streams.size() && !(target < p.cumulative[i])) ++i;
  return p.streams[i];
}

Batch StreamMixture::micro(std::int64_t step, std::int64_t m, std::int64_t micro_batch) const {
  const Sampler& s = streams_[stream_of(step, m)].sampler;
  if (s.budget()) return s.train_micro(step, m);
  return s.train(step, SampleRange{m * micro_batch, micro_batch});
}

BatchCounts StreamMixture::counts(std::int64_t step, std::int64_t m, std::int64_t micro_batch) const {
  const Sampler& s = streams_[stream_of(step, m)].sampler;
  if (s.budget()) return s.budget()->shape(step, m);
  return s.train_counts(step, SampleRange{m * micro_batch, micro_batch});
}

}  // namespace exa::io
