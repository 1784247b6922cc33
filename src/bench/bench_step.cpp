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
      model(mcfg,
            [&] {
              auto o = model::ModelOptions::from_deck(c);
              o.fence_phases = true;
              return o;
            }()),
      opt(store, c),
      sampler(train::open_deck_dataset(c), static_cast<std::uint64_t>(c.get_int("train.seed"))),
      micro_batch(c.get_int("train.micro_batch")),
      grad_accum(c.get_int("train.grad_accum")),
      batch(micro_batch, mcfg.seq_len) {
  store.initialize(static_cast<std::uint64_t>(c.get_int("train.seed")));
  w = model::bind_values(mcfg, store);
  g = model::bind_grads(mcfg, store);
}

void Step::log_tokens(const io::Batch& b) {
  tokens_log.insert(tokens_log.end(), b.inputs.begin(), b.inputs.end());
  tokens_log.insert(tokens_log.end(), b.targets.begin(), b.targets.end());
}

io::Batch Step::sample(std::int64_t step, std::int64_t j) {
  const auto slice = io::dp_slice(micro_batch * grad_accum, 0, 1);
  auto b = sampler.train(step, io::micro_slice(slice, j, micro_batch));
  log_tokens(b);
  return b;
}

std::pair<double, double> Step::run(std::int64_t step) {
  store.zero_grads();
  const parallel::StepWork work{[&](int j) { return batch.load(sample(step, j)); },
                                opt.accumulation().backward_seed(),
                                parallel::StepRegions{kIo, kForward, kBackward, true}};
  const auto t = exec.run(work, int(grad_accum));
  optim::StepReport rep;
  {
    ScopedRegion r(kOptimizer, true);
    rep = opt.step(store, step);
  }
  if (!rep.finite()) optim::require_finite(rep.clip, step + 1);
  return {t.loss / double(grad_accum), t.imbalance};
}

}  // namespace exa::bench
