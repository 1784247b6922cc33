#include "bench/bench_step.hpp"

#include <algorithm>

#include "core/profiling.hpp"
#include "io/dataset.hpp"
#include "model/parameter_specs.hpp"
#include "train/deck_dataset.hpp"

namespace exa::bench {

Step::Step(const deck::Config& c)
    : cfg(c),
      mcfg(model::ModelConfig::from_deck(c)),
      store(model::parameter_specs(mcfg)),
      model(mcfg, model::ModelOptions{/*fence_phases=*/true, {}}),
      opt(store, c),
      sampler(train::open_deck_dataset(c), static_cast<std::uint64_t>(c.get_int("train.seed"))),
      micro_batch(c.get_int("train.micro_batch")),
      grad_accum(c.get_int("train.grad_accum")),
      batch(micro_batch, mcfg.seq_len) {
  store.initialize(static_cast<std::uint64_t>(c.get_int("train.seed")));
  w = model::bind_values(mcfg, store);
  g = model::bind_grads(mcfg, store);
}

void Step::upload(const io::Batch& b) {
  batch.upload(b);
  tokens_log.insert(tokens_log.end(), b.inputs.begin(), b.inputs.end());
  tokens_log.insert(tokens_log.end(), b.targets.begin(), b.targets.end());
}

std::pair<double, double> Step::run(std::int64_t step) {
  const auto slice = io::dp_slice(micro_batch * grad_accum, 0, 1);
  store.zero_grads();
  double loss = 0, imbalance = 1;
  for (std::int64_t j = 0; j < grad_accum; ++j) {
    {
      ScopedRegion r(kIo, true);
      upload(sampler.train(step, io::micro_slice(slice, j, micro_batch)));
    }
    {
      ScopedRegion r(kForward, true);
      const auto fr = model.forward(w, batch.inputs, batch.targets);
      loss += fr.loss.loss;
      imbalance = std::max(imbalance, fr.max_imbalance());
    }
    {
      ScopedRegion r(kBackward, true);
      model.backward(w, g, opt.accumulation().backward_seed());
    }
  }
  optim::StepReport rep;
  {
    ScopedRegion r(kOptimizer, true);
    rep = opt.step(store, step);
  }
  if (!rep.finite()) optim::require_finite(rep.clip, step + 1);
  return {loss / double(grad_accum), imbalance};
}

}  // namespace exa::bench
