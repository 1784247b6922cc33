// examoe-plan: which parallel layout for a model on a cluster (docs/planner.md).
//
//   examoe-plan DECK --cluster FILE [--ranks N] [--top K] [--emit best.toml]
//       search every layout and policy of N ranks; print the best K with why
//   examoe-plan DECK --cluster FILE --ranks N --predict [--json]
//       the cost model's prediction for the deck's own layout
//   examoe-plan calibrate --out FILE [--nodes N] [--devices-per-node D] [--ranks-per-node R]
//       (under mpiexec: the links inside and between nodes)
//   examoe-plan reliability --node-mtbf-hours H --nodes N --tier NAME:CKPT_S:RESTART_S ... [--interval-s T] [--json]
#include <CLI/CLI.hpp>
#include <fmt/format.h>

#include <cmath>
#include <cstdio>
#include <fstream>
#include <nlohmann/json.hpp>

#include "comm/mpi_env.hpp"
#include "comm/node_threads.hpp"
#include "core/deck/config.hpp"
#include "core/error.hpp"
#include "core/thread_check.hpp"
#include "core/runtime.hpp"
#include "driver_common.hpp"
#include "model/model_config.hpp"
#include "plan/calibrate.hpp"
#include "plan/cost_model.hpp"
#include "plan/reliability.hpp"
#include "plan/search.hpp"
#include "train/flops.hpp"

namespace {

using namespace exa;

constexpr double GiB = 1073741824.0;

// The deck for one rank with its own layout set aside: the search chooses
// every [parallel] and [pipeline] key.
deck::Config model_deck(const std::string& path, std::vector<std::string> sets) {
  for (const char* s : {"parallel.dp=0", "parallel.tp=1", "parallel.pp=1", "parallel.cp=1", "parallel.ep=1",
                        "parallel.etp=0", "parallel.zero=0", "parallel.sequence_parallel=false",
                        "parallel.microbatches=0", "pipeline.schedule=1f1b", "pipeline.virtual_stages=1",
                        "pipeline.layers_per_stage=auto", "parallel.ranks_per_node=0"})
    sets.insert(sets.begin(), s);
  return deck::Config::load(path, sets, 1);
}

nlohmann::json to_json(const plan::Candidate& c, const plan::StepCost& r) {
  return {{"layout", c.describe()},
          {"step_s", r.step},
          {"tokens_per_s", r.tokens_per_s},
          {"mfu", r.mfu},
          {"fits", r.fits},
          {"bound", r.bound},
          {"seconds",
           {{"compute", r.compute}, {"tp", r.tp}, {"a2a", r.a2a}, {"cp", r.cp}, {"zero_gather", r.zero_gather},
            {"pp_p2p", r.pp_p2p}, {"dp", r.dp}, {"bubble", r.bubble}, {"optimizer", r.optimizer}}},
          {"memory_bytes",
           {{"parameters", r.memory.parameters}, {"gradients", r.memory.gradients},
            {"optimizer", r.memory.optimizer}, {"activations", r.memory.activations},
            {"total", r.memory.total()}}}};
}

std::string memory_line(const plan::MemoryBytes& m) {
  return fmt::format("params {:.2f}, grads {:.2f}, optimizer {:.2f}, activations {:.2f} = {:.2f} GiB",
                     m.parameters / GiB, m.gradients / GiB, m.optimizer / GiB, m.activations / GiB, m.total() / GiB);
}

std::string breakdown(const plan::StepCost& r) {
  return fmt::format("compute {:.3g} s, exposed tp {:.3g}, a2a {:.3g}, cp {:.3g}, zero {:.3g}, p2p {:.3g}, dp {:.3g}, "
                     "bubble {:.3g}, optimizer {:.3g}",
                     r.compute, r.tp, r.a2a, r.cp, r.zero_gather, r.pp_p2p, r.dp, r.bubble, r.optimizer);
}

std::vector<std::string> split_list(const std::string& s) {
  std::vector<std::string> out;
  std::size_t a = 0;
  while (a <= s.size() && !s.empty()) {
    const auto b = s.find(',', a);
    out.push_back(s.substr(a, b == std::string::npos ? std::string::npos : b - a));
    if (b == std::string::npos) break;
    a = b + 1;
  }
  return out;
}

}  // namespace

int main(int argc, char** argv) {
  exa::MpiEnvironment mpi(argc, argv);
  exa::KokkosRuntime kokkos(argc, argv);
  CLI::App app{"examoe-plan: choose the parallel layout of a model for a cluster"};
  app.require_subcommand(0, 1);
  std::string deck_path, cluster_path, emit, precisions, compressions, a2a_compressions, weight_compressions;
  std::vector<std::string> sets;
  int ranks = 0, top = 5;
  std::int64_t global_batch = 0;
  bool predict_only = false, json = false, fixed_recompute = false;
  double imbalance = 1;
  app.add_option("deck", deck_path, "the model's input deck");
  app.add_option("--cluster", cluster_path, "cluster description (input/clusters/*.toml)");
  app.add_option("--ranks", ranks, "devices (ranks) to plan for; default: every device of the cluster");
  app.add_option("--top", top, "plans to print")->check(CLI::Range(1, 1000));
  app.add_option("--emit", emit, "write the best plan as a deck to this file");
  app.add_option("--set", sets, "override a deck value, section.key=value (repeatable)");
  app.add_option("--global-batch", global_batch, "sequences per step (default: the deck's dp*micro_batch*grad_accum)");
  app.add_option("--precisions", precisions, "matmul precisions to try, e.g. fp32,bf16 (default: the deck's)");
  app.add_option("--compressions", compressions, "gradient wire formats to try, e.g. none,bf16,int8,topk (default: the deck's)");
  app.add_option("--weight-compressions", weight_compressions,
                 "ZeRO parameter-allgather wire formats to try, e.g. none,bf16,int8 (default: the deck's)");
  app.add_option("--a2a-compressions", a2a_compressions,
                 "expert all-to-all wire formats to try, e.g. none,bf16,int8 (default: the deck's)");
  app.add_flag("--fixed-recompute", fixed_recompute, "keep the deck's memory.recompute instead of trying none, full, full/sqrt");
  app.add_option("--expert-imbalance", imbalance,
                 "most-loaded expert's tokens over the mean (metrics.jsonl expert_imbalance); default 1, balanced")
      ->check(CLI::Range(1.0, 1e6));
  app.add_flag("--predict", predict_only, "predict the deck's own layout on --ranks ranks instead of searching");
  app.add_flag("--json", json, "one JSON line per plan");
  auto* cal = app.add_subcommand("calibrate", "measure this machine and write a cluster file");
  std::string cal_out, scratch = ".";
  int cal_nodes = 0, cal_rpn = 0, cal_dpn = 0;
  cal->add_option("--out", cal_out, "cluster file to write")->required();
  cal->add_option("--scratch", scratch, "directory for the write-bandwidth test");
  cal->add_option("--nodes", cal_nodes, "nodes the cluster file describes (default: the nodes launched on)");
  cal->add_option("--devices-per-node", cal_dpn, "devices per node the cluster file describes (default: the ranks per node)");
  cal->add_option("--ranks-per-node", cal_rpn, "pretend nodes of this many consecutive ranks (default: detect)");
  auto* rel = app.add_subcommand("reliability", "checkpoint intervals and effective training time (Young-Daly)");
  double mtbf_h = 0;
  int nodes = 0;
  std::vector<std::string> tiers;
  rel->add_option("--node-mtbf-hours", mtbf_h, "mean time between failures of one node, hours")->required();
  rel->add_option("--nodes", nodes, "nodes of the job")->required();
  rel->add_option("--tier", tiers, "NAME:CHECKPOINT_S:RESTART_S, per checkpoint tier (repeatable)")->required();
  double interval = 0;
  rel->add_option("--interval-s", interval, "evaluate at this checkpoint interval instead of the optimum");
  bool rel_json = false;
  rel->add_flag("--json", rel_json, "one JSON line per tier");
  if (const int rc = exa::driver::parse(app, argc, argv, mpi.rank(), "examoe-plan"); rc >= 0) return rc;
  try {
    if (cal->parsed()) {
      // A rank measures what a run's rank gets only with the run's
      // threads: more BLAS threads than its share of the cores would
      // measure an oversubscribed core.
      const ThreadSetup threads = comm::probe_node_threads(MPI_COMM_WORLD);
      if (mpi.rank() == 0)
        for (const auto& w : thread_warnings(threads))
          std::fprintf(stderr, "warning: examoe-plan calibrate: %s; otherwise the rates measured are those of shared cores\n",
                       w.c_str());
      plan::CalibrateOptions o;
      o.nodes = cal_nodes;
      o.ranks_per_node = cal_rpn;
      o.devices_per_node = cal_dpn;
      o.scratch_dir = scratch;
      const auto c = plan::calibrate(o, MPI_COMM_WORLD);
      if (mpi.rank() == 0) {
        std::ofstream(cal_out) << "# Written by examoe-plan calibrate (" << mpi.size() << " ranks).\n"
                               << plan::to_toml(c);
        (void)plan::load_cluster(cal_out);  // what it wrote reads back, or the error says which value
        std::printf("calibrated %d nodes x %d: inter-node link %.2f GB/s %.1f us (allreduce %.2f, all-to-all %.2f)\n",
                    c.nodes, c.devices_per_node, c.inter.bandwidth_gbs, c.inter.latency_us, c.inter.allreduce_gbs,
                    c.inter.alltoall_gbs);
        std::printf("calibrated: fp32 %.3f TFLOP/s (half rate at %.0f rows), bf16 %.3f, memory %.1f GB/s, link %.2f GB/s "
                    "%.1f us (allreduce %.2f, at 256 MiB %.2f, all-to-all %.2f GB/s per rank; %.0f%% of a nonblocking "
                    "allreduce under compute), write %.2f GB/s -> %s\n",
                    c.fp32_tflops, c.gemm_half_rows, c.bf16_tflops, c.memory_bandwidth_gbs, c.intra.bandwidth_gbs,
                    c.intra.latency_us, c.intra.allreduce_gbs, c.intra.allreduce_large_gbs, c.intra.alltoall_gbs,
                    100 * c.intra.overlap, c.storage_write_gbs, cal_out.c_str());
      }
      return 0;
    }
    EXA_REQUIRE(mpi.size() == 1, "examoe-plan plans on one rank; run it without mpiexec (only `calibrate` uses ranks)");
    if (rel->parsed()) {
      std::vector<plan::TierCost> tc;
      for (const auto& t : tiers) {
        const auto parts = split_list(t);
        EXA_REQUIRE(parts.size() == 1, "--tier {}: write NAME:CHECKPOINT_S:RESTART_S", t);
        const auto a = t.find(':'), b = t.rfind(':');
        EXA_REQUIRE(a != std::string::npos && b != a, "--tier {}: write NAME:CHECKPOINT_S:RESTART_S, e.g. memory:0.5:60", t);
        tc.push_back({t.substr(0, a), std::stod(t.substr(a + 1, b - a - 1)), std::stod(t.substr(b + 1))});
      }
      const auto p = plan::plan_reliability(mtbf_h, nodes, tc, interval);
      if (rel_json) {
        for (std::size_t i = 0; i < p.tiers.size(); ++i) {
          const auto& t = p.tiers[i];
          std::printf("%s\n", nlohmann::json{{"tier", t.tier.name},
                                             {"system_mtbf_s", p.system_mtbf_s},
                                             {"checkpoint_s", t.tier.checkpoint_s},
                                             {"restart_s", t.tier.restart_s},
                                             {"interval_s", t.interval_s},
                                             {"effective_training_time", t.efficiency},
                                             {"best", int(i) == p.best}}
                                   .dump()
                                   .c_str());
        }
        return 0;
      }
      std::printf("system MTBF %.0f s (%.2f h) for %d nodes of %.0f h\n", p.system_mtbf_s, p.system_mtbf_s / 3600, nodes,
                  mtbf_h);
      for (std::size_t i = 0; i < p.tiers.size(); ++i) {
        const auto& t = p.tiers[i];
        std::printf("%-10s checkpoint %.3g s, restart %.3g s: every %.0f s, effective training time %.2f%%%s\n",
                    t.tier.name.c_str(), t.tier.checkpoint_s, t.tier.restart_s, t.interval_s, 100 * t.efficiency,
                    int(i) == p.best ? "  <- best" : "");
      }
      return 0;
    }
    EXA_REQUIRE(!deck_path.empty(), "examoe-plan: give the model's deck (examoe-plan DECK --cluster FILE)");
    EXA_REQUIRE(!cluster_path.empty(), "examoe-plan: give --cluster FILE (input/clusters/ has presets; "
                "`examoe-plan calibrate --out FILE` measures this machine)");
    const auto cluster = plan::load_cluster(cluster_path);
    if (ranks == 0) ranks = cluster.devices();
    if (predict_only) {
      const auto cfg = deck::Config::load(deck_path, sets, ranks);
      const auto mcfg = model::ModelConfig::from_deck(cfg);
      const auto c = plan::Candidate::from_deck(cfg);
      plan::PredictOptions po;
      po.expert_imbalance = imbalance;
      const auto r = plan::predict(mcfg, c, cluster, nullptr, po);
      if (json) {
        auto j = to_json(c, r);
        j["ranks"] = ranks;
        j["flops_per_token"] = plan::flops_per_token(mcfg).total();
        j["train_flops_per_token"] = train::count_flops(mcfg).per_token_train;
        // Each pipeline stage's rank 0 (tensor part 0, EP rank 0, ZeRO part 0).
        for (int s = 0; s < c.grid.pp; ++s) {
          const auto m = plan::stage_memory(mcfg, c, s);
          j["stage_memory"].push_back({{"parameters", m.parameters}, {"gradients", m.gradients},
                                       {"optimizer", m.optimizer}, {"activations", m.activations}});
        }
        std::printf("%s\n", j.dump().c_str());
      } else {
        std::printf("%s on %d ranks of %s (%s):\n  step %.4g s, %.4g tokens/s, MFU %.1f%%, %s\n  %s\n  memory: %s\n",
                    c.describe().c_str(), ranks, cluster.name.c_str(), plan::describe(cluster.topology).c_str(),
                    r.step, r.tokens_per_s, 100 * r.mfu,
                    r.reason.c_str(), breakdown(r).c_str(), memory_line(r.memory).c_str());
      }
      return 0;
    }
    const auto base = model_deck(deck_path, sets);
    plan::SearchOptions o;
    o.world = ranks;
    o.top = top;
    o.global_batch = global_batch;
    o.precisions = split_list(precisions);
    o.compressions = split_list(compressions);
    o.a2a_compressions = split_list(a2a_compressions);
    o.weight_compressions = split_list(weight_compressions);
    o.vary_recompute = !fixed_recompute;
    o.predict.expert_imbalance = imbalance;
    const auto res = plan::search(base, cluster, o);
    const auto mcfg = model::ModelConfig::from_deck(base);
    if (!json) {
      std::printf("%s on %d of %s (%d nodes x %d, %s): %.3g parameters, %.4g FLOPs/token, global batch %lld "
                  "sequences\n",
                  deck_path.c_str(), ranks, cluster.name.c_str(), cluster.nodes, cluster.devices_per_node,
                  plan::describe(cluster.topology).c_str(),
                  [&] {
                    double n = 0;
                    for (const auto& s : model::parameter_specs(mcfg)) n += double(s.numel());
                    return n;
                  }(),
                  plan::flops_per_token(mcfg).total(), static_cast<long long>(res.global_batch));
      std::printf("searched %lld candidates (%lld grid shapes) in %.2f s: %lld do not fit, %lld dominated, %lld refused "
                  "by the deck checks\n",
                  static_cast<long long>(res.space), static_cast<long long>(res.layouts), res.seconds,
                  static_cast<long long>(res.pruned_memory), static_cast<long long>(res.dominated),
                  static_cast<long long>(res.refused));
    }
    if (res.top.empty()) {
      const auto& u = res.best_unfit;
      // Parameters, gradients and optimizer state shrink about as 1/ranks
      // at ZeRO 3: the ranks at which the smallest layout's state would
      // leave room for its activations.
      const auto& m = u.cost.memory;
      const double room = cluster.usable_memory_bytes() - m.activations - m.communication;
      const double state = m.parameters + m.gradients + m.optimizer;
      const std::string more = room > 0 ? fmt::format("about {} ranks ({:.1f}x)", int(std::ceil(ranks * state / room)),
                                                      state / room)
                                        : std::string("more ranks than the activations allow");
      throw Error(fmt::format(
          "no layout of {} ranks fits {:.1f} GiB per device; the smallest is {} at {}. It would fit on {}, or on "
          "devices with {:.0f} GiB",
          ranks, cluster.memory_gib, u.candidate.describe(), memory_line(m), more, m.total() / cluster.usable_memory_bytes() * cluster.memory_gib));
    }
    for (std::size_t i = 0; i < res.top.size(); ++i) {
      const auto& t = res.top[i];
      if (json) {
        std::printf("%s\n", to_json(t.candidate, t.cost).dump().c_str());
        continue;
      }
      std::printf("%zu. %s\n   step %.4g s, %.4g tokens/s, MFU %.1f%%; %s\n   %s\n", i + 1, t.candidate.describe().c_str(),
                  t.cost.step, t.cost.tokens_per_s, 100 * t.cost.mfu, t.cost.reason.c_str(),
                  memory_line(t.cost.memory).c_str());
    }
    if (!emit.empty()) {
      const auto cfg = plan::candidate_config(base, res.top[0].candidate, ranks);
      std::ofstream(emit) << "# examoe-plan: " << res.top[0].candidate.describe() << " on " << ranks << " ranks of "
                          << cluster.name << "\n"
                          << cfg.to_toml();
      if (!json) std::printf("wrote %s\n", emit.c_str());
    }
    return 0;
  } catch (const exa::Error& e) {
    exa::driver::print_error(mpi.rank(), "examoe-plan", e.what());
    return 1;
  }
}
