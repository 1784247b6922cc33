// Weighted data streams (io/stream_mixture.hpp): each micro-batch comes
// whole from one stream, chosen by a pure function of (seed, step,
// micro-batch) in proportion to the weights; one stream gives exactly its
// sampler's batches.
#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "io/stream_mixture.hpp"

using namespace exa::io;

namespace {

// A byte corpus whose every token is `value` (so a batch says its stream).
Dataset constant(unsigned char value, std::int64_t n = 4000) {
  auto bytes = std::make_shared<std::vector<unsigned char>>(std::size_t(n), value);
  return Dataset(TokenStore(std::shared_ptr<const unsigned char>(bytes, bytes->data()), bytes->data(), 1, n, 256,
                            std::string(1, char(value))),
                 0.1, 16, 256);
}

Dataset varied(std::int64_t n = 20000) {
  auto bytes = std::make_shared<std::vector<unsigned char>>(std::size_t(n));
  std::uint32_t x = 3;
  for (auto& b : *bytes) b = static_cast<unsigned char>((x = x * 1664525u + 1013904223u) >> 24);
  return Dataset(TokenStore(std::shared_ptr<const unsigned char>(bytes, bytes->data()), bytes->data(), 1, n, 256,
                            "varied"),
                 0.1, 16, 256);
}

}  // namespace

TEST(StreamMixture, MicroBatchesComeFromStreamsInProportionToTheWeights) {
  std::vector<DataStream> s;
  s.push_back({"a", 3.0, Sampler(constant('a'), 7)});
  s.push_back({"b", 1.0, Sampler(constant('b'), 7)});
  s.push_back({"c", 0.0, Sampler(constant('c'), 7)});  // never drawn
  const StreamMixture mix(std::move(s), 11);
  std::vector<int> n(3, 0);
  const int draws = 4000;
  for (int k = 0; k < draws; ++k) {
    const std::int64_t step = k / 8, m = k % 8;
    const std::size_t i = mix.stream_of(step, m);
    ++n[i];
    const Batch b = mix.micro(step, m, 2);
    for (std::int32_t v : b.inputs) ASSERT_EQ(v, std::int32_t("abc"[i])) << "a micro-batch is from its stream only";
  }
  EXPECT_EQ(n[2], 0);
  // 3:1 within four standard deviations of the binomial (sd ~ 27 of 3000).
  EXPECT_NEAR(double(n[0]), 0.75 * draws, 4 * std::sqrt(draws * 0.75 * 0.25));
  // A pure function of (seed, step, micro-batch).
  const StreamMixture again(
      std::vector<DataStream>{{"a", 3.0, Sampler(constant('a'), 7)}, {"b", 1.0, Sampler(constant('b'), 7)},
                              {"c", 0.0, Sampler(constant('c'), 7)}},
      11);
  for (int k = 0; k < 64; ++k) EXPECT_EQ(again.stream_of(k / 8, k % 8), mix.stream_of(k / 8, k % 8));
  EXPECT_EQ(mix.tasks(), (std::vector<std::string>{"a", "b", "c"}));
}

TEST(StreamMixture, OneStreamIsItsSampler) {
  const Sampler plain(varied(), 5);
  const StreamMixture mix(std::vector<DataStream>{{"data", 1.0, Sampler(varied(), 5)}}, 5);
  // Rank r's micro-batch j of step s is global micro-batch r A + j.
  const std::int64_t B = 2, A = 3, dp = 2;
  for (std::int64_t r = 0; r < dp; ++r)
    for (std::int64_t j = 0; j < A; ++j) {
      const Batch want = plain.train(4, micro_slice(dp_slice(B * A * dp, int(r), int(dp)), j, B));
      EXPECT_EQ(mix.micro(4, r * A + j, B).inputs, want.inputs);
    }
}

TEST(StreamMixture, TasksGroupStreams) {
  const StreamMixture mix(
      std::vector<DataStream>{{"x", 1.0, Sampler(constant('a'), 1)}, {"y", 1.0, Sampler(constant('b'), 1)},
                              {"x", 1.0, Sampler(constant('c'), 1)}},
      1);
  EXPECT_EQ(mix.tasks(), (std::vector<std::string>{"x", "y"}));
  EXPECT_EQ(mix.task_of(2), 0u);
  EXPECT_EQ(mix.task_of(1), 1u);
}
