#include "plan/timeline.hpp"

#include <algorithm>
#include <deque>
#include <map>
#include <tuple>

#include "core/error.hpp"
#include "parallel/pipeline/schedules.hpp"

namespace exa::plan {

Timeline simulate_pipeline(const std::string& schedule, const std::vector<OpTimes>& times, int n_micro, int chunks,
                           bool fixed_w) {
  using Op = parallel::MicroBatchOp;
  const int pp = int(times.size());
  EXA_REQUIRE(pp >= 1, "simulate_pipeline: no stages");
  // The search simulates the same few schedules for many candidates: each
  // (schedule, stages, chunks, micro-batches)'s operation lists are built
  // once (the planner runs on one thread).
  static std::map<std::tuple<std::string, int, int, int>, std::vector<std::vector<Op>>> made;
  auto it = made.find({schedule, pp, chunks, n_micro});
  if (it == made.end()) {
    std::vector<std::vector<Op>> lists(static_cast<std::size_t>(pp));
    for (int s = 0; s < pp; ++s) {
      if (pp == 1) {
        for (int m = 0; m < n_micro; ++m) {
          lists[0].push_back({Op::Kind::Forward, m, 0});
          lists[0].push_back({Op::Kind::Backward, m, 0});
        }
      } else {
        lists[std::size_t(s)] = parallel::pipeline::make_schedule(schedule, s, pp, chunks)->ops(n_micro);
      }
    }
    it = made.emplace(std::make_tuple(schedule, pp, chunks, n_micro), std::move(lists)).first;
  }
  const auto& ops = it->second;
  const bool deferred = schedule == "zb" && pp > 1;
  // Finish times of each (stage, kind, chunk, micro); < 0 not yet run.
  std::vector<double> done(std::size_t(pp) * 2 * std::size_t(chunks) * std::size_t(n_micro), -1.0);
  auto key = [&](int s, Op::Kind k, int c, int m) {
    return ((std::size_t(s) * 2 + std::size_t(k == Op::Kind::Backward)) * std::size_t(chunks) + std::size_t(c)) *
               std::size_t(n_micro) + std::size_t(m);
  };
  // The input an operation waits for: the previous stage's forward (chunk
  // c - 1 of the last stage for a later chunk's first stage), the next
  // stage's backward, or on the model's last chunk its own forward.
  // `received`: it comes from another stage.
  auto input = [&](int s, const Op& op, bool& known, bool& received) -> double {
    received = true;
    int ps = s, pc = op.chunk;
    Op::Kind pk = op.kind;
    double link = 0;
    if (op.kind == Op::Kind::Forward) {
      if (s > 0) {
        ps = s - 1;
        link = times[std::size_t(ps)].p2p;
      } else if (op.chunk > 0) {
        ps = pp - 1;
        pc = op.chunk - 1;
        link = times[std::size_t(ps)].p2p;
      } else {
        known = true;
        received = false;
        return 0;
      }
    } else {
      if (s < pp - 1) {
        ps = s + 1;
        link = times[std::size_t(ps)].p2p;
      } else if (op.chunk < chunks - 1) {
        ps = 0;
        pc = op.chunk + 1;
        link = times[0].p2p;
      } else {
        pk = Op::Kind::Forward;
        received = false;
      }
    }
    const double t = done[key(ps, pk, pc, op.micro)];
    known = t >= 0;
    return known ? t + link : 0;
  };
  std::vector<std::size_t> next(static_cast<std::size_t>(pp), 0);
  std::vector<double> free_at(std::size_t(pp), 0), busy(std::size_t(pp), 0);
  std::vector<std::deque<double>> pending(static_cast<std::size_t>(pp));  // zb's deferred weight gradients
  std::size_t left = 0;
  for (const auto& o : ops) left += o.size();
  while (left > 0) {
    bool progress = false;
    for (int s = 0; s < pp; ++s) {
      auto& i = next[std::size_t(s)];
      while (i < ops[std::size_t(s)].size()) {
        const Op& op = ops[std::size_t(s)][i];
        bool known = false, received = false;
        const double ready = input(s, op, known, received);
        if (!known) break;
        double& t = free_at[std::size_t(s)];
        const auto& tm = times[std::size_t(s)];
        // ZB-H1: a deferred weight gradient runs where the stage would
        // wait (or at the fixed points); the stage's last backward runs
        // undeferred, after every W still waiting, so that the
        // data-parallel reductions see whole gradients.
        const bool last = deferred && i + 1 == ops[std::size_t(s)].size();
        auto& queue = pending[std::size_t(s)];
        auto run_oldest = [&] {
          t += queue.front();
          busy[std::size_t(s)] += queue.front();
          queue.pop_front();
        };
        if (fixed_w && received && !queue.empty()) run_oldest();
        while (!queue.empty() && (last || (!fixed_w && t < ready))) run_oldest();
        const double d = op.kind == Op::Kind::Forward ? tm.forward : tm.backward + (last ? tm.weight : 0.0);
        t = std::max(t, ready) + d;
        busy[std::size_t(s)] += d;
        done[key(s, op.kind, op.chunk, op.micro)] = t;
        if (deferred && !last && op.kind == Op::Kind::Backward) {
          queue.push_back(tm.weight);
          while (queue.size() > std::size_t(pp - s)) run_oldest();
        }
        ++i;
        --left;
        progress = true;
      }
    }
    EXA_REQUIRE(progress, "simulate_pipeline: schedule '{}' deadlocks with {} stages and {} micro-batches", schedule,
                pp, n_micro);
  }
  Timeline tl;
  for (int s = 0; s < pp; ++s) {
    EXA_ASSERT(pending[std::size_t(s)].empty());  // every stage ends on a backward, which ran them
    tl.span = std::max(tl.span, free_at[std::size_t(s)]);
    tl.busy = std::max(tl.busy, busy[std::size_t(s)]);
  }
  tl.bubble = tl.span > 0 ? 1.0 - tl.busy / tl.span : 0.0;
  return tl;
}

}  // namespace exa::plan
