#include "io/sampler.hpp"

#include <utility>

#include <fmt/format.h>

#include "core/error.hpp"
#include "core/philox.hpp"

namespace exa::io {

SampleRange dp_slice(std::int64_t global_batch, int dp_rank, int dp) {
  EXA_ASSERT(dp >= 1 && dp_rank >= 0 && dp_rank < dp && global_batch >= 1);
  EXA_REQUIRE(global_batch % dp == 0,
              "a global batch of {} samples does not split evenly over {} data-parallel ranks; make the global "
              "batch (dp * train.micro_batch * train.grad_accum) a multiple of dp",
              global_batch, dp);
  const std::int64_t per = global_batch / dp;
  return SampleRange{dp_rank * per, per};
}

SampleRange micro_slice(const SampleRange& slice, std::int64_t micro, std::int64_t micro_batch) {
  EXA_ASSERT(micro >= 0 && micro_batch >= 1 && (micro + 1) * micro_batch <= slice.count);
  return SampleRange{slice.first + micro * micro_batch, micro_batch};
}

Sampler::Sampler(Dataset data, std::uint64_t seed) : data_(std::move(data)), seed_(seed) {}

Documents parse_documents(const std::string& name) {
  if (name == "concat") return Documents::concat;
  if (name == "packed") return Documents::packed;
  throw Error(fmt::format("data.documents = \"{}\" is not known; use \"concat\" or \"packed\"", name));
}

Sampler Sampler::packed(Dataset data, std::uint64_t seed, const std::vector<std::int64_t>& doc_starts) {
  Sampler s(std::move(data), seed);
  const auto& d = s.data_;
  s.train_pack_ = std::make_shared<const DocumentPacking>(doc_starts, 0, d.n_train(), d.seq_len());
  if (d.n_val() > 0)
    s.val_pack_ = std::make_shared<const DocumentPacking>(doc_starts, d.n_train(), d.n_tokens(), d.seq_len());
  return s;
}

Sampler Sampler::budgeted(Dataset data, std::uint64_t seed, const std::vector<std::int64_t>& doc_starts,
                          std::int64_t batch_tokens) {
  Sampler s(std::move(data), seed);
  s.budget_ = std::make_shared<const TokenBudget>(doc_starts, 0, s.data_.n_train(), s.data_.seq_len(), batch_tokens,
                                                  seed);
  return s;
}

Batch Sampler::train_micro(std::int64_t step, std::int64_t m) const {
  EXA_REQUIRE(budget_ != nullptr, "Sampler::train_micro: the sampler has no token budget (train.batch_tokens = 0)");
  return budget_->batch(data_.tokens(), step, m);
}

std::uint64_t Sampler::train_draw(std::int64_t step, std::int64_t sample) const {
  EXA_ASSERT(step >= 0 && sample >= 0);
  // Its own stream name, so data order never correlates with weight init.
  const PhiloxKey key = philox_key(seed_, "examoe.data.train");
  const auto s = static_cast<std::uint64_t>(step), i = static_cast<std::uint64_t>(sample);
  const PhiloxCounter r = philox4x32(PhiloxCounter{static_cast<std::uint32_t>(i), static_cast<std::uint32_t>(i >> 32),
                                                   static_cast<std::uint32_t>(s), static_cast<std::uint32_t>(s >> 32)},
                                     key);
  return static_cast<std::uint64_t>(r.c0) | static_cast<std::uint64_t>(r.c1) << 32;
}

std::int64_t Sampler::train_offset(std::int64_t step, std::int64_t sample) const {
  const std::uint64_t u = train_draw(step, sample);
  if (train_pack_) return static_cast<std::int64_t>(u % static_cast<std::uint64_t>(train_pack_->sequences()));
  // Valid starts are 0 .. n_train - T - 1 (the window's last token is < n_train).
  // Modulo bias is below n_train / 2^64: immaterial.
  const auto starts = static_cast<std::uint64_t>(data_.n_train() - data_.seq_len());
  return static_cast<std::int64_t>(u % starts);
}

Batch Sampler::packed_batch(const DocumentPacking& pack, std::int64_t count,
                           const std::function<std::int64_t(std::int64_t)>& sequence) const {
  const std::int64_t T = data_.seq_len();
  const auto n = static_cast<std::size_t>(count * T);
  Batch b{count, T, std::vector<std::int32_t>(n), std::vector<std::int32_t>(n), std::vector<std::int32_t>(n),
          std::vector<std::int32_t>(n)};
  for (std::int64_t k = 0; k < count; ++k)
    pack.fill(data_.tokens(), sequence(k),
              PackedRows{b.inputs.data() + k * T, b.targets.data() + k * T, b.doc_start.data() + k * T,
                         b.doc_end.data() + k * T});
  return b;
}

BatchCounts Sampler::train_counts(std::int64_t step, SampleRange samples) const {
  const std::int64_t T = data_.seq_len();
  BatchCounts c{samples.count, T, samples.count * T, samples.count * T};
  if (!train_pack_) return c;
  c.tokens = c.targets = 0;
  for (std::int64_t k = 0; k < samples.count; ++k) {
    const std::int64_t s = train_offset(step, samples.first + k);
    c.tokens += train_pack_->filled(s);
    c.targets += train_pack_->valid_targets(s);
  }
  return c;
}

Batch Sampler::train(std::int64_t step, SampleRange samples) const {
  if (train_pack_)
    return packed_batch(*train_pack_, samples.count,
                        [&](std::int64_t k) { return train_offset(step, samples.first + k); });
  const std::int64_t T = data_.seq_len();
  Batch b{samples.count, T, std::vector<std::int32_t>(samples.count * T), std::vector<std::int32_t>(samples.count * T)};
  for (std::int64_t k = 0; k < samples.count; ++k)
    data_.window(train_offset(step, samples.first + k), b.inputs.data() + k * T, b.targets.data() + k * T);
  return b;
}

std::int64_t Sampler::n_val_windows() const {
  if (train_pack_) return val_pack_ ? val_pack_->sequences() : 0;
  return data_.n_val() == 0 ? 0 : (data_.n_val() - 1) / data_.seq_len();
}

std::int64_t Sampler::val_offset(std::int64_t sample) const {
  const std::int64_t w = n_val_windows();
  EXA_REQUIRE(w > 0,
              "{}: there is no validation split (data.val_fraction = 0); set data.val_fraction > 0 to "
              "evaluate",
              data_.tokens().source());
  return data_.n_train() + (sample % w) * data_.seq_len();
}

Batch Sampler::val(SampleRange samples) const {
  if (train_pack_) {
    const std::int64_t w = n_val_windows();
    EXA_REQUIRE(w > 0, "{}: there is no validation split (data.val_fraction = 0); set data.val_fraction > 0 to "
                "evaluate", data_.tokens().source());
    return packed_batch(*val_pack_, samples.count, [&](std::int64_t k) { return (samples.first + k) % w; });
  }
  const std::int64_t T = data_.seq_len();
  Batch b{samples.count, T, std::vector<std::int32_t>(samples.count * T), std::vector<std::int32_t>(samples.count * T)};
  for (std::int64_t k = 0; k < samples.count; ++k)
    data_.window(val_offset(samples.first + k), b.inputs.data() + k * T, b.targets.data() + k * T);
  return b;
}

Batch Sampler::val_batch(std::int64_t index, std::int64_t global_batch, int dp_rank, int dp) const {
  const SampleRange r = dp_slice(global_batch, dp_rank, dp);
  return val(SampleRange{index * global_batch + r.first, r.count});
}

}  // namespace exa::io
