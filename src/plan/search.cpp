#include "plan/search.hpp"

#include <algorithm>
#include <chrono>
#include <cstdint>

#include "core/error.hpp"
#include "model/model_config.hpp"

namespace exa::plan {

namespace {

std::vector<int> divisors(std::int64_t n) {
  std::vector<int> d;
  for (std::int64_t i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(int(i));
  return d;
}

bool divides(std::int64_t a, std::int64_t b) { return a > 0 && b % a == 0; }

// Whether a group of `size` members at world stride `stride` (its blocks
// of size * stride consecutive ranks) has as many members on every node it
// spans, which the hierarchical collectives need (comm::make_hierarchical).
bool uniform_nodes(int size, int stride, int per_node) {
  const std::int64_t span = std::int64_t(size) * stride;
  return span <= per_node ? per_node % span == 0 : span % per_node == 0 && per_node % stride == 0;
}

// Context parallelism beyond 32 ranks splits a sequence into blocks too
// small to hide the ring behind; the search stops there.
constexpr int kMaxCp = 32;

// The precision, wire formats and collectives of one candidate.
struct Policy {
  std::string precision, compression, a2a_compression, weight_compression;
  bool hierarchical = false, hierarchical_a2a = false;
  std::string compress_scope = "all";
};

}  // namespace

deck::Config candidate_config(const deck::Config& base, const Candidate& c, int world) {
  auto sets = base.overrides();
  for (auto& o : c.overrides()) sets.push_back(o);
  return deck::Config::from_text(base.deck_text(), base.deck_path(), sets, world);
}

SearchResult search(const deck::Config& base, const Cluster& cl, const SearchOptions& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  const auto cfg = model::ModelConfig::from_deck(base);
  const Candidate deck = Candidate::from_deck(base);
  SearchResult res;
  const std::int64_t B = opt.global_batch > 0 ? opt.global_batch : deck.micro_batch * deck.grad_accum * deck.grid.dp;
  res.global_batch = B;
  const auto precisions = opt.precisions.empty() ? std::vector<std::string>{deck.precision} : opt.precisions;
  const auto compressions = opt.compressions.empty() ? std::vector<std::string>{deck.compression} : opt.compressions;
  const auto a2a_formats =
      opt.a2a_compressions.empty() ? std::vector<std::string>{deck.a2a_compression} : opt.a2a_compressions;
  const auto weight_formats =
      opt.weight_compressions.empty() ? std::vector<std::string>{deck.weight_compression} : opt.weight_compressions;
  const bool moe = cfg.moe_every > 0 && cfg.n_experts > 0;
  // Every combination asked for, each wire format only where its
  // collective exists (data > 1, ep > 1, ZeRO's allgathers); the deck's
  // elsewhere. Flat and hierarchical collectives where the group spans
  // nodes evenly (flat elsewhere), with the compression scopes the deck
  // allows: gradients compressed over hierarchical collectives on the
  // inter-node stage only, weights on both stages or that one. Without
  // vary_collectives, the deck's own, and nothing where the layout cannot
  // have them.
  auto policies_for = [&](bool reduces, bool all_to_all, bool gathers, bool data_spans, bool data_even,
                          bool ep_spans, bool ep_even) {
    std::vector<Policy> out;
    if (!opt.vary_collectives && ((deck.hierarchical && !data_even) || (deck.hierarchical_a2a && !ep_even)))
      return out;
    for (const auto& p : precisions)
      for (const auto& g : reduces ? compressions : std::vector<std::string>{deck.compression})
        for (const auto& a : all_to_all ? a2a_formats : std::vector<std::string>{deck.a2a_compression})
          for (const auto& w : gathers ? weight_formats : std::vector<std::string>{deck.weight_compression}) {
            if (!opt.vary_collectives) {
              out.push_back({p, g, a, w, deck.hierarchical, deck.hierarchical_a2a, deck.compress_scope});
              continue;
            }
            for (const bool h : data_spans && data_even ? std::vector<bool>{false, true} : std::vector<bool>{false}) {
              std::vector<std::string> scopes = {"all"};
              if (h && g != "none") scopes = {"inter_node"};
              if (h && g == "none" && w != "none") scopes = {"all", "inter_node"};
              const bool two_stage_a2a = ep_spans && ep_even;
              for (const auto& scope : scopes)
                for (const bool ha : two_stage_a2a ? std::vector<bool>{false, true} : std::vector<bool>{false})
                  out.push_back({p, g, a, w, h, ha, scope});
            }
          }
    return out;
  };
  std::vector<Ranked> ranked;

  for (int tp : divisors(opt.world)) {
    if (tp > cl.devices_per_node || !divides(tp, cfg.n_heads) || !divides(tp, cfg.n_kv_heads) ||
        !divides(tp, cfg.vocab_size) || !divides(tp, cfg.d_ff) || (moe && cfg.n_shared_experts > 0 && !divides(tp, cfg.d_expert)))
      continue;
    for (int cp : divisors(opt.world / tp)) {
      if (cp > kMaxCp || (cp > 1 && !divides(2 * cp, cfg.seq_len))) continue;
      for (int pp : divisors(opt.world / (tp * cp))) {
        if (pp > cfg.n_layers) continue;
        const int dp = opt.world / (tp * cp * pp);
        const int data = dp * cp;
        for (int ep : moe ? divisors(data) : std::vector<int>{1}) {
          if (moe && !divides(ep, cfg.n_experts)) continue;
          // etp: 0 (= tp), or blocks of each smaller divisor of tp (1:
          // whole experts).
          std::vector<int> etps{0};
          if (tp > 1 && moe)
            for (int e : divisors(tp))
              if (e < tp) etps.push_back(e);
          for (int etp : etps) {
            if (moe && !divides(etp == 0 ? tp : etp, cfg.d_expert)) continue;
            ++res.layouts;
            // Context parallelism's modes hold the same memory: they vary
            // with the policies, past the memory check.
            std::vector<std::string> modes = {"ring"};
            if (cp > 1 && divides(cp, cfg.n_kv_heads / tp)) modes.push_back("a2a");
            Candidate c = deck;
            c.grid = comm::GridSizes{opt.world, tp, cp, dp, pp, ep, 0, etp};
            c.layers_per_stage = "auto";
            for (std::int64_t mb = deck.micro_batch; mb >= 1; mb /= 2) {
              if (B % (std::int64_t(dp) * mb) != 0) continue;
              c.micro_batch = mb;
              c.grad_accum = B / (std::int64_t(dp) * mb);
              c.round = 0;
              for (int sp = 0; sp <= (tp > 1 ? 1 : 0); ++sp) {
                c.sequence_parallel = sp == 1;
                if (sp && !divides(std::int64_t(tp) * cp, cfg.seq_len)) continue;
                std::vector<std::pair<std::string, int>> schedules = {{"1f1b", 1}};
                if (pp > 1) {
                  schedules.push_back({"gpipe", 1});
                  schedules.push_back({"zb", 1});
                  for (int v : {2, 4})
                    if (divides(std::int64_t(pp) * v, cfg.n_layers) && divides(pp, c.grad_accum))
                      schedules.push_back({"interleaved", v});
                }
                for (const auto& [sched, v] : schedules) {
                  c.schedule = sched;
                  c.virtual_stages = v;
                  // Each ZeRO stage adds communication and each recompute
                  // policy compute, both only ever costing time in the
                  // model: past the first (zero, recompute) that fits
                  // without recompute, every later pair is slower (the
                  // dominated ones are counted, not evaluated).
                  bool settled = false;
                  for (int zero = 0; zero <= (data > 1 ? 3 : 0); ++zero) {
                    c.zero = zero;
                    // Memory policies, cheapest first: the recompute
                    // policies, then the same with the experts offloaded
                    // (page traffic on top), then their moments too. A
                    // fitting policy dominates those with as much
                    // recomputation and as much offload or more; one with
                    // less recomputation but more offload may be faster.
                    struct MemoryPolicy {
                      std::string rc, ckl;
                      bool off_experts, off_optimizer;
                    };
                    std::vector<MemoryPolicy> recomputes = {
                        {deck.recompute, deck.checkpoint_layers, deck.offload_experts, deck.offload_optimizer}};
                    if (opt.vary_recompute) {
                      recomputes.clear();
                      for (const auto& [e, o] : std::initializer_list<std::pair<bool, bool>>{{false, false}, {true, false}, {true, true}})
                        for (const auto& [rc, ckl] : std::vector<std::pair<const char*, const char*>>{
                                 {"none", "all"}, {"selective", "all"}, {"full", "all"}, {"full", "sqrt"}})
                          recomputes.push_back({rc, ckl, e, o});
                    }
                    const std::size_t per_level = opt.vary_recompute ? 4 : 1;
                    std::size_t fit_k = SIZE_MAX;  // the least recomputation that fitted at this offload level or below
                    const auto policies =
                        policies_for(data > 1, ep > 1, data > 1 && zero >= 1,
                                     data > 1 && std::int64_t(data) * tp > cl.devices_per_node,
                                     uniform_nodes(data, tp, cl.devices_per_node),
                                     ep > 1 && std::int64_t(ep) * tp > cl.devices_per_node,
                                     uniform_nodes(ep, tp, cl.devices_per_node));
                    if (policies.empty()) continue;  // the deck's collectives do not fit this layout's nodes
                    // Top-k's residuals are the one policy memory depends on:
                    // the memory policies are sized without them when any
                    // policy has none, and top-k's candidates again with them.
                    const bool dense = std::any_of(policies.begin(), policies.end(),
                                                   [](const Policy& p) { return p.compression != "topk"; });
                    for (std::size_t ri = 0; ri < recomputes.size(); ++ri) {
                      const auto& [rc, ckl, off_e, off_o] = recomputes[ri];
                      const auto n = std::int64_t(policies.size() * modes.size());
                      res.space += n;
                      if (settled || ri % per_level >= fit_k) {
                        res.dominated += n;
                        continue;
                      }
                      c.recompute = rc;
                      c.checkpoint_layers = ckl;
                      c.offload_experts = off_e;
                      c.offload_optimizer = off_o;
                      c.compression = dense ? "none" : "topk";
                      const MemoryBytes mem = peak_memory(cfg, c);
                      if (mem.total() > cl.usable_memory_bytes()) {
                        res.pruned_memory += n;
                        const double smallest = res.best_unfit.cost.memory.total();
                        if (smallest == 0 || mem.total() < smallest)
                          res.best_unfit = {c, predict(cfg, c, cl, &mem, opt.predict)};
                        continue;
                      }
                      fit_k = std::min(fit_k, ri % per_level);
                      if (ri == 0) settled = true;
                      MemoryBytes mem_topk;
                      bool topk_sized = false;
                      for (const auto& p : policies) {
                        const MemoryBytes* m = &mem;
                        if (dense && p.compression == "topk") {
                          if (!topk_sized) {
                            c.compression = "topk";
                            mem_topk = peak_memory(cfg, c);
                            topk_sized = true;
                          }
                          if (mem_topk.total() > cl.usable_memory_bytes()) {
                            res.pruned_memory += std::int64_t(modes.size());
                            continue;
                          }
                          m = &mem_topk;
                        }
                        c.precision = p.precision;
                        c.compression = p.compression;
                        c.a2a_compression = p.a2a_compression;
                        c.weight_compression = p.weight_compression;
                        c.hierarchical = p.hierarchical;
                        c.hierarchical_a2a = p.hierarchical_a2a;
                        c.compress_scope = p.compress_scope;
                        for (const auto& mode : modes) {
                          c.cp_mode = mode;
                          ranked.push_back({c, predict(cfg, c, cl, m, opt.predict)});
                        }
                      }
                    }
                  }
                }
              }
            }
          }
        }
      }
    }
  }
  // Ties (policies that change nothing the model sees, e.g. compressing
  // gradients whose reduction is hidden anyway) go to the least memory,
  // then keep the order the candidates were made in (each policy's list
  // starts with "none"), so that the order does not depend on how many
  // candidates the search met.
  std::stable_sort(ranked.begin(), ranked.end(), [](const Ranked& a, const Ranked& b) {
    if (a.cost.step != b.cost.step) return a.cost.step < b.cost.step;
    return a.cost.memory.total() < b.cost.memory.total();
  });
  for (const auto& r : ranked) {
    if (int(res.top.size()) >= opt.top) break;
    try {
      (void)candidate_config(base, r.candidate, opt.world);
    } catch (const Error&) {
      ++res.refused;
      continue;
    }
    res.top.push_back(r);
  }
  res.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - t0).count();
  return res;
}

}  // namespace exa::plan
