#include "plan/auto_layout.hpp"

#include <fmt/format.h>

#include "core/deck/micro_batch.hpp"
#include "core/deck/deck_checks.hpp"
#include "core/error.hpp"
#include "plan/calibrate.hpp"
#include "plan/search.hpp"

namespace exa::plan {

AutoLayout choose_layout(const deck::Config& cfg, int world, MPI_Comm comm) {
  // The deck's lines are the loader's check; the command line's --set here.
  for (const auto& key : deck::auto_layout_keys()) {
    if (deck::sets_layout_key(cfg.setting(key), true))
      throw Error(fmt::format("{} parallel.auto = true chooses {} itself; drop this --set (or set "
                              "parallel.auto = false to keep your layout)",
                              cfg.locate({key}), key));
  }
  const std::string where = cfg.get_string("parallel.cluster");
  Cluster cluster;
  if (where == "calibrate") {
    CalibrateOptions o;
    o.seconds = 0.1;
    int size = 1;
    MPI_Comm_size(comm, &size);
    const int rpn = int(cfg.get_int("parallel.ranks_per_node"));
    if (size > 1) o.ranks_per_node = rpn;
    cluster = calibrate(o, comm);
    if (size == 1 && world > 1) {
      // examoe --check --ranks N on one process: N ranks of this machine,
      // on its one node unless parallel.ranks_per_node says otherwise.
      cluster.devices_per_node = rpn > 0 ? rpn : world;
      cluster.nodes = world / cluster.devices_per_node;
    }
  } else {
    try {
      cluster = load_cluster(where);
    } catch (const Error& e) {
      throw Error(fmt::format("{} parallel.cluster: {}", cfg.locate({"parallel.cluster"}), e.what()));
    }
  }
  auto sets = cfg.overrides();
  const auto base = deck::Config::from_text(cfg.deck_text(), cfg.deck_path(), sets, 1);
  SearchOptions o;
  o.world = world;
  o.top = 1;
  o.vary_recompute = false;  // the deck's memory, precision, compression and collectives stay
  o.vary_collectives = false;
  o.global_batch = deck::micro_batch_sequences(cfg) * cfg.get_int("train.grad_accum") * world;
  const auto res = search(base, cluster, o);
  EXA_REQUIRE(!res.top.empty(), "{} parallel.auto: no layout of {} ranks fits {:.1f} GiB per device ({}); set the "
              "layout yourself or use more ranks",
              cfg.locate({"parallel.auto"}), world, cluster.memory_gib, cluster.name);
  const auto& best = res.top[0];
  AutoLayout a{candidate_config(base, best.candidate, world), ""};
  a.summary = fmt::format(
      "parallel.auto: {} on {} ranks of {} (predicted step {:.3g} s, {:.4g} tokens/s, MFU {:.1f}%; {}); "
      "{} candidates searched in {:.2f} s",
      best.candidate.describe(), world, cluster.name, best.cost.step, best.cost.tokens_per_s, 100 * best.cost.mfu,
      best.cost.reason, res.space, res.seconds);
  return a;
}

}  // namespace exa::plan
