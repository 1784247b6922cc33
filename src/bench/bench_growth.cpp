#include "bench/bench_growth.hpp"

#include <fmt/format.h>
#include <mpi.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <limits>
#include <nlohmann/json.hpp>

#include "bench/bench_profile.hpp"
#include "bench/temp_dir.hpp"
#include "core/deck/config.hpp"
#include "core/error.hpp"
#include "core/profiling.hpp"
#include "model/growth_schedule.hpp"
#include "train/trainer.hpp"

namespace exa::bench {

namespace {

namespace fs = std::filesystem;

// The schedule's mean expert count over the run's steps, rounded to a
// count the layout takes (a multiple of ep).
std::int64_t mean_experts(const deck::Config& cfg) {
  const auto g = model::GrowthSchedule::from_deck(cfg);
  const std::int64_t steps = cfg.get_int("train.steps"), ep = std::max<std::int64_t>(1, cfg.get_int("parallel.ep"));
  double sum = 0;
  for (std::int64_t s = 0; s < steps; ++s) sum += double(g.experts_after(s));
  const auto mean = std::int64_t(sum / double(steps) / double(ep) + 0.5) * ep;
  return std::max(ep, mean);
}

std::vector<nlohmann::json> records(const std::string& run_dir) {
  std::vector<nlohmann::json> out;
  std::ifstream in(fs::path(run_dir) / "metrics.jsonl");
  for (std::string line; std::getline(in, line);)
    if (!line.empty() && line[0] == '{') out.push_back(nlohmann::json::parse(line));
  return out;
}

}  // namespace

GrowthBench run_growth_bench(const std::string& deck, const std::vector<std::string>& overrides, int pairs,
                             const std::string& workdir) {
  const auto base = deck::Config::load(deck, overrides, 1);
  EXA_REQUIRE(model::GrowthSchedule::from_deck(base).enabled(),
              "examoe-bench --growth: {} does not grow its experts (growth.every = 0, or max_experts <= "
              "moe.n_experts); give a deck with a [growth] schedule, e.g. input/grow.toml",
              deck);
  const bool own_dir = workdir.empty();
  std::string dir = workdir;
  if (own_dir) {
    dir = make_temp_dir("examoe-bench-growth");
    EXA_REQUIRE(!dir.empty(), "examoe-bench --growth: could not create a temporary directory under {}; pass --workdir",
                fs::temp_directory_path().string());
  }
  fs::create_directories(dir);
  const std::int64_t steps = base.get_int("train.steps");
  // No evaluation, checkpoints or per-step lines: the step loop, growth
  // and distillation only.
  std::vector<std::string> quiet = overrides;
  for (const auto& s : {"train.eval_every=0", "checkpoint.every=0", "checkpoint.local_every=0",
                        "checkpoint.memory_every=0", "checkpoint.resume=false"})
    quiet.push_back(s);
  quiet.push_back(fmt::format("train.log_every={}", steps));
  struct Variant {
    std::string name;
    std::vector<std::string> sets;
  };
  const std::int64_t mean = mean_experts(base);
  const std::vector<Variant> variants = {
      {"grown", {}},
      {"plain", {"growth.distill_steps=0"}},
      {"static", {"growth.every=0", "growth.distill_steps=0", fmt::format("moe.n_experts={}", mean)}}};
  GrowthBench b;
  b.steps = steps;
  for (const auto& v : variants) b.runs.push_back({v.name, std::numeric_limits<double>::infinity(),
                                                   std::numeric_limits<double>::infinity(), 0, 0});
  b.runs[2].experts = mean;
  for (int p = 0; p < pairs; ++p) {
    for (std::size_t k = 0; k < variants.size(); ++k) {
      const std::string run_dir = (fs::path(dir) / fmt::format("{}_{}", variants[k].name, p)).string();
      fs::remove_all(run_dir);
      auto sets = quiet;
      sets.insert(sets.end(), variants[k].sets.begin(), variants[k].sets.end());
      sets.push_back("output.run_dir=" + run_dir);
      const auto cfg = deck::Config::load(deck, sets, 1);
      double wall = 0, cpu = 0;
      {
        train::Trainer t(cfg, MPI_COMM_WORLD);
        const double w0 = wall_seconds(), c0 = process_cpu_seconds();
        t.run();
        wall = wall_seconds() - w0;
        cpu = process_cpu_seconds() - c0;
        if (k < 2) b.runs[k].experts = t.model_config().n_experts;
        b.runs[k].tokens = double(cfg.get_int("train.micro_batch") * cfg.get_int("train.grad_accum") *
                                  t.model_config().seq_len * steps);
      }
      b.runs[k].wall_s = std::min(b.runs[k].wall_s, wall);
      b.runs[k].cpu_s = std::min(b.runs[k].cpu_s, cpu);
      if (k != 0 || p + 1 != pairs) continue;
      b.events.clear();
      b.teacher_s = 0;
      for (const auto& r : records(run_dir)) {
        if (r.value("event", "") == "growth")
          b.events.push_back({r["step"].get<std::int64_t>(), r["experts_before"].get<std::int64_t>(),
                              r["experts_after"].get<std::int64_t>(), r["stall_s"].get<double>(),
                              r.value("teacher_s", 0.0)});
        if (r.contains("distill"))
          b.teacher_s += r["distill"]["teacher_s"].get<double>() * r["distill"]["steps"].get<double>();
      }
    }
  }
  if (own_dir) fs::remove_all(dir);
  return b;
}

std::string format_growth_report(const GrowthBench& b) {
  const auto& st = b.runs[2];
  std::string out = fmt::format("expert growth, {} steps (best of the pairs; tokens/s by wall and CPU clock)\n", b.steps);
  out += fmt::format("  {:<8} {:>8} {:>12} {:>12} {:>10} {:>10}\n", "run", "experts", "wall tok/s", "CPU tok/s",
                     "wall ratio", "CPU ratio");
  for (const auto& r : b.runs)
    out += fmt::format("  {:<8} {:>8} {:>12.0f} {:>12.0f} {:>9.1f}% {:>9.1f}%\n", r.name,
                       r.name == "static" ? fmt::format("{}", r.experts) : fmt::format("-> {}", r.experts),
                       r.tokens / r.wall_s, r.tokens / r.cpu_s, 100 * st.wall_s / r.wall_s, 100 * st.cpu_s / r.cpu_s);
  for (const auto& e : b.events)
    out += fmt::format("  event after step {}: {} -> {} experts, stall {:.1f} ms (teacher made and saved: {:.1f} ms)\n",
                       e.step, e.from, e.to, 1e3 * e.stall_s, 1e3 * e.teacher_s);
  out += fmt::format("  distillation: the teacher's forwards took {:.2f} s, {:.1f}% of the grown run's wall time\n",
                     b.teacher_s, 100 * b.teacher_s / b.runs[0].wall_s);
  return out;
}

std::string growth_json_line(const GrowthBench& b) {
  nlohmann::json j;
  j["event"] = "bench_growth";
  j["steps"] = b.steps;
  for (const auto& r : b.runs)
    j["runs"][r.name] = {{"experts", r.experts}, {"wall_s", r.wall_s},     {"cpu_s", r.cpu_s},
                         {"tokens", r.tokens},   {"wall_vs_static", b.runs[2].wall_s / r.wall_s},
                         {"cpu_vs_static", b.runs[2].cpu_s / r.cpu_s}};
  for (const auto& e : b.events)
    j["events"].push_back(
        {{"step", e.step}, {"from", e.from}, {"to", e.to}, {"stall_s", e.stall_s}, {"teacher_s", e.teacher_s}});
  j["teacher_forward_s"] = b.teacher_s;
  return j.dump();
}

}  // namespace exa::bench
