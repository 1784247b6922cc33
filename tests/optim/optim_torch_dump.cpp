// optim_torch_dump OUT.json SCHEDULE: runs ExaMoE's optimizer (schedule,
// accumulation with a loss scale, clipping, AdamW with masked decay) for a
// few steps on a hand-made store with random micro-batch gradients and
// writes the inputs and results as JSON for torch_crosscheck.py, which
// repeats the run with torch.optim.AdamW, clip_grad_norm_ and LambdaLR.
#include <Kokkos_Core.hpp>
#include <cstdio>
#include <fmt/format.h>
#include <random>
#include <string>
#include <vector>

#include "optim/optimizer.hpp"

using namespace exa;
using exa::model::ParamSpec;

namespace {

std::string list(const std::vector<float>& x, std::size_t b, std::size_t n) {
  std::string s = "[";
  for (std::size_t k = 0; k < n; ++k) s += fmt::format("{}{:.9g}", k ? "," : "", x[b + k]);
  return s + "]";
}

std::vector<float> host(const View1<float>& v) {
  auto h = Kokkos::create_mirror_view_and_copy(Kokkos::HostSpace(), v);
  return std::vector<float>(h.data(), h.data() + h.extent(0));
}

// Per-tensor lists of a flat local buffer.
std::string per_tensor(const model::ParameterStore& s, const std::vector<float>& x) {
  std::string out = "[";
  for (std::size_t i = 0; i < s.size(); ++i) {
    out += (i ? "," : "") + list(x, static_cast<std::size_t>(s.local_offset(i)),
                                 static_cast<std::size_t>(s.shard(i).count));
  }
  return out + "]";
}

int run(const std::string& path, const std::string& schedule) {
  using I = ParamSpec::Init;
  std::vector<ParamSpec> specs = {
      {"w1", {6, 5}, I::Normal, 0.5, true},
      {"norm", {5}, I::Ones, 0.0, false},
      {"w2", {3, 6}, I::Normal, 0.5, true},
      {"gain", {4}, I::Ones, 0.0, false},
  };
  model::ParameterStore store(specs);
  store.initialize(2024);
  const std::int64_t steps = 7;
  const double lr = 0.05, min_lr = 0.005, clip = 0.8, loss_scale = 4.0;
  const std::int64_t warmup = 2, accum = 2;
  const optim::AdamWConfig acfg{0.9, 0.95, 1e-8, 0.1};
  optim::Optimizer opt(store, optim::LrSchedule(lr, min_lr, warmup, steps, optim::parse_decay(schedule)),
                       optim::GradClipper(clip), optim::GradAccumulation{accum, loss_scale}, acfg);

  std::FILE* f = std::fopen(path.c_str(), "w");
  if (!f) return 2;
  fmt::print(f,
             "{{\"config\": {{\"lr\": {}, \"min_lr\": {}, \"warmup_steps\": {}, \"steps\": {}, \"schedule\": \"{}\", "
             "\"beta1\": {}, \"beta2\": {}, \"eps\": {}, \"weight_decay\": {}, \"grad_clip\": {}, "
             "\"grad_accum\": {}, \"loss_scale\": {}}},\n",
             lr, min_lr, warmup, steps, schedule, acfg.beta1, acfg.beta2, acfg.eps, acfg.weight_decay, clip, accum,
             loss_scale);
  fmt::print(f, "\"tensors\": [");
  const auto init = host(store.values());
  for (std::size_t i = 0; i < specs.size(); ++i) {
    fmt::print(f, "{}{{\"name\": \"{}\", \"shape\": [{}], \"decay\": {}, \"init\": {}}}", i ? ",\n" : "\n",
               specs[i].name, fmt::join(specs[i].shape, ","), specs[i].weight_decay ? "true" : "false",
               list(init, static_cast<std::size_t>(store.local_offset(i)), static_cast<std::size_t>(specs[i].numel())));
  }
  fmt::print(f, "],\n\"steps\": [");

  std::mt19937_64 rng(77);
  std::normal_distribution<double> normal(0.0, 1.0);
  const double amplitude[steps] = {1.0, 0.05, 0.5, 0.02, 0.3, 0.08, 0.6};
  const auto n = static_cast<std::size_t>(store.local_numel());
  auto grads = Kokkos::create_mirror_view(Kokkos::HostSpace(), store.grads());
  for (std::int64_t s = 0; s < steps; ++s) {
    // Micro-batch backwards: each adds loss_scale * its gradient into the buffer.
    std::vector<std::vector<float>> micro(accum, std::vector<float>(n));
    std::vector<float> buf(n, 0.0f);
    for (auto& g : micro) {
      for (std::size_t k = 0; k < n; ++k) {
        g[k] = static_cast<float>(amplitude[s] * normal(rng));
        buf[k] += static_cast<float>(opt.accumulation().backward_seed()) * g[k];
      }
    }
    for (std::size_t k = 0; k < n; ++k) grads(k) = buf[k];
    Kokkos::deep_copy(store.grads(), grads);
    const auto r = opt.step(store, s);
    if (!r.applied) return 3;
    fmt::print(f, "{}{{\"lr\": {:.17g}, \"norm\": {:.17g}, \"clipped\": {}, \"micro\": [", s ? ",\n" : "\n", r.lr,
               r.clip.norm, r.clip.clipped() ? "true" : "false");
    for (std::size_t j = 0; j < micro.size(); ++j) fmt::print(f, "{}{}", j ? "," : "", per_tensor(store, micro[j]));
    fmt::print(f, "]}}");
  }
  fmt::print(f, "],\n\"final\": {{\"values\": {},\n\"exp_avg\": {},\n\"exp_avg_sq\": {}}}}}\n",
             per_tensor(store, host(store.values())), per_tensor(store, host(opt.adamw().exp_avg())),
             per_tensor(store, host(opt.adamw().exp_avg_sq())));
  std::fclose(f);
  return 0;
}

}  // namespace

int main(int argc, char** argv) {
  if (argc != 3) {
    std::fprintf(stderr, "usage: optim_torch_dump OUT.json cosine|linear|constant\n");
    return 2;
  }
  Kokkos::initialize(argc, argv);
  int rc = 1;
  try {
    rc = run(argv[1], argv[2]);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "optim_torch_dump: %s\n", e.what());
  }
  Kokkos::finalize();
  return rc;
}
