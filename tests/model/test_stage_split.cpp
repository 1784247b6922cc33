// A pipeline split in one process: stage [0, 1) feeds its output to stage
// [1, 2), whose d(loss)/d(input) flows back into the first stage's
// backward. Loss and every gradient equal the whole model's (double).
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>

#include "model/stage_model.hpp"
#include "model_test_util.hpp"

using namespace exa::model;
using namespace exa::test;

namespace {

double worst_relative(const std::vector<double>& a, const std::vector<double>& b) {
  double diff = 0, mag = 0;
  for (std::size_t i = 0; i < a.size(); ++i) {
    diff = std::max(diff, std::fabs(a[i] - b[i]));
    mag = std::max(mag, std::fabs(b[i]));
  }
  return diff / mag;
}

void check(ModelConfig cfg) {
  const auto values = random_flat<double>(cfg, 21);
  const auto w = bind_flat(cfg, values);
  const auto in = tokens(2, 10, cfg.vocab_size, 3);
  const auto tg = shifted(in, cfg.vocab_size, 3);

  exa::View1<double> g_whole("g_whole", values.extent(0)), g_split("g_split", values.extent(0));
  StageModel<double> whole(cfg);
  StageModel<double>::Input win;
  win.tokens = in;
  win.targets = tg;
  auto& cw = whole.forward(w, win);
  const double loss_whole = cw.result.loss.loss;
  whole.backward(cw, w, bind_flat(cfg, g_whole), 0.7);

  const auto seams0 = Seams<double>::local(StagePlan::layers(cfg, 0, 1));
  const auto seams1 = Seams<double>::local(StagePlan::layers(cfg, 1, cfg.n_layers));
  StageModel<double> s0(cfg, StagePlan::layers(cfg, 0, 1), seams0), s1(cfg, StagePlan::layers(cfg, 1, 2), seams1);
  EXPECT_EQ(s0.param_names().front(), "embed.weight");
  EXPECT_EQ(s1.param_names().back(), cfg.tie_embeddings ? "embed.weight" : "lm_head.weight");
  const auto gs = bind_flat(cfg, g_split);
  StageModel<double>::Input in0;
  in0.tokens = in;
  auto& c0 = s0.forward(w, in0);
  StageModel<double>::Input in1;
  in1.hidden = c0.out;
  in1.shape = c0.shape;
  in1.targets = tg;
  auto& c1 = s1.forward(w, in1);
  // The loss splits into the stages' parts: ce and the last stage's router
  // losses there, the first stage's router losses (dense layer: none) here.
  EXPECT_NEAR(c0.result.loss.loss + c1.result.loss.loss, loss_whole, 1e-12 * std::fabs(loss_whole));
  exa::View2<double> d_in("d_in", c0.shape.N(), cfg.d_model);
  s1.backward(c1, w, gs, 0.7, {}, d_in);
  s0.backward(c0, w, gs, 0.7, d_in);
  const double e = worst_relative(host(g_split), host(g_whole));
  std::printf("two stages vs whole model: gradients %.3e\n", e);
  EXPECT_LT(e, 1e-12);
}

}  // namespace

TEST(StageSplit, TwoStagesReproduceTheWholeModel) { check(small()); }

TEST(StageSplit, TiedEmbeddingsAcrossStagesSumIntoOneGradient) {
  auto cfg = small();
  cfg.tie_embeddings = true;
  check(cfg);
}

TEST(StageSplit, InnerStagesNeedTheirNeighboursTensors) {
  const auto cfg = small();
  const auto values = random_flat<double>(cfg, 2);
  const auto w = bind_flat(cfg, values);
  StageModel<double> s1(cfg, StagePlan::layers(cfg, 1, 2), Seams<double>::local(StagePlan::layers(cfg, 1, 2)));
  StageModel<double>::Input in;
  in.shape = {2, 10};
  in.hidden = exa::View2<double>("h", 5, cfg.d_model);  // wrong row count
  in.targets = tokens(2, 10, cfg.vocab_size, 1);
  EXPECT_THROW(s1.forward(w, in), exa::Error);
  EXPECT_THROW(StagePlan::layers(cfg, 1, 1), exa::Error);
}
