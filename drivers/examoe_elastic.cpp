// examoe-elastic: runs a training job under mpiexec and, when it dies (a
// rank killed, the watchdog's abort), relaunches it on fewer ranks with the
// same global batch, resuming from the newest checkpoint (or on as many ranks
// while hot spares last, --spares), and grows it back (--max-ranks) when
// capacity returns. Each restart is a
// JSON line in <run_dir>/elastic.jsonl (docs/architecture.md, "Elastic
// restart").
//
//   examoe-elastic [--ranks N] [--min-ranks M] [--spares S] [--max-ranks X] [--grow-after S] [--grow-after-steps K]
//                  [--max-restarts R] [--mpiexec CMD] [--examoe PATH] DECK.toml [--set k=v]...
//     (exit: the job's, 0 when it finished; 1 when it cannot be relaunched)
#include <CLI/CLI.hpp>
#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include <algorithm>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <fstream>
#include <optional>
#include <regex>
#include <sstream>
#include <unistd.h>

#include "child_process.hpp"
#include "core/deck/config.hpp"
#include "core/error.hpp"
#include "driver_common.hpp"
#include "elastic_layout.hpp"

extern char** environ;

namespace fs = std::filesystem;
using exa::elastic::Layout;

namespace {

volatile pid_t g_child = 0;
volatile sig_atomic_t g_stop = 0;

// A scheduler's SIGTERM / SIGUSR1 (or ^C) goes to the job, which saves and
// stops; the supervisor then does not relaunch it.
void forward(int sig) {
  g_stop = sig;
  if (g_child > 0) kill(g_child, sig);
}

// The EXAMOE_FAULT_* variables set here that make a run fail, each as
// "NAME=" (a prefix only that variable has): all but the two that only pace
// a run, a delay after each step and a hold for the stop signal.
std::vector<std::string> failure_injection() {
  static const std::vector<std::string> pacing{"EXAMOE_FAULT_STEP_DELAY_S", "EXAMOE_FAULT_HOLD_AFTER_STEP"};
  std::vector<std::string> names;
  for (char** e = environ; *e != nullptr; ++e) {
    const std::string var(*e);
    const std::string name = var.substr(0, var.find('='));
    if (name.rfind("EXAMOE_FAULT_", 0) == 0 && std::find(pacing.begin(), pacing.end(), name) == pacing.end())
      names.push_back(name + "=");
  }
  return names;
}

double now_s() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

void note(const std::string& msg) {
  fmt::print(stderr, "examoe-elastic: {}\n", msg);
  std::fflush(stderr);
}

struct Job {
  std::string examoe, deck;
  std::vector<std::string> mpiexec, sets;

  // The deck's --set overrides with `extra` last; a key `extra` sets is
  // dropped from the user's.
  std::vector<std::string> overrides(const std::vector<std::string>& extra) const {
    std::vector<std::string> out;
    const auto key = [](const std::string& s) { return s.substr(0, s.find('=')); };
    for (const auto& s : sets) {
      bool replaced = false;
      for (const auto& e : extra) replaced = replaced || key(e) == key(s);
      if (!replaced) out.push_back(s);
    }
    out.insert(out.end(), extra.begin(), extra.end());
    return out;
  }
  // examoe's arguments: the deck and the overrides.
  std::vector<std::string> args(const std::vector<std::string>& extra) const {
    std::vector<std::string> out{deck};
    for (const auto& s : overrides(extra)) out.insert(out.end(), {"--set", s});
    return out;
  }
};

struct Checked {
  Layout layout;
  std::string run_dir;
};

// `examoe DECK --check --ranks K`: the deck's own validation (layout, data,
// the checkpoint to resume) and its resolved configuration, or nullopt with
// the reason in *why.
std::optional<Checked> check(const Job& job, int ranks, const std::vector<std::string>& extra, std::string* why) {
  std::vector<std::string> argv{job.examoe};
  for (const auto& a : job.args(extra)) argv.push_back(a);
  argv.insert(argv.end(), {"--check", "--ranks", std::to_string(ranks)});
  std::string out, err;
  volatile pid_t pid = 0;
  const auto end = exa::elastic::run_child(
      argv, {}, [&](bool is_err, const std::string& line) { (is_err ? err : out) += line + "\n"; }, &pid);
  if (!end.ok()) {
    *why = fmt::format("{}{}", err, out);
    return std::nullopt;
  }
  // The values as the deck resolves them at this size (dp = 0 is inferred).
  const auto cfg = exa::deck::Config::load(job.deck, job.overrides(extra), ranks);
  const auto num = [&](const char* key) { return cfg.get_int(key); };
  Checked c;
  Layout& l = c.layout;
  l.ranks = ranks;
  l.tp = int(num("parallel.tp"));
  l.cp = int(num("parallel.cp"));
  l.pp = int(num("parallel.pp"));
  l.ep = int(num("parallel.ep"));
  l.dp = int(num("parallel.dp"));
  if (l.dp == 0) l.dp = ranks / (l.tp * l.cp * l.pp);
  l.micro_batch = num("train.micro_batch");
  l.grad_accum = num("train.grad_accum");
  c.run_dir = cfg.get_string("output.run_dir");
  return c;
}

// The newest step record (one with a loss) in metrics.jsonl, 0 when none.
std::int64_t last_logged_step(const fs::path& metrics) {
  std::ifstream in(metrics);
  std::int64_t step = 0;
  for (std::string line; std::getline(in, line);) {
    const auto j = nlohmann::json::parse(line, nullptr, false);
    if (j.is_object() && j.contains("loss") && j.contains("step")) step = j["step"].get<std::int64_t>();
  }
  return step;
}

// What the log of a dying job says about why (the launcher's or the
// watchdog's line).
struct Cause {
  std::string detail;
  void watch(const std::string& line) {
    static const std::regex why("KILLED BY SIGNAL: [0-9]+|stopped responding[^;]*|exiting abruptly[^;]*");
    std::smatch m;
    if (detail.empty() && std::regex_search(line, m, why)) detail = m.str();
  }
};

// A restart whose record waits for the relaunched job to say where it resumed.
struct Restart {
  nlohmann::json record;
  double died_at = 0;
  bool written = false;
};

void append(const fs::path& file, Restart& r) {
  if (r.written) return;
  fs::create_directories(file.parent_path());
  std::ofstream(file, std::ios::app) << r.record.dump() << "\n";
  r.written = true;
}

// When a shrunk job may grow back (--max-ranks): capacity counts as back
// after --grow-after seconds or --grow-after-steps steps of the shrunk
// launch, or when the file <run_dir>/grow exists (removed when acted on).
struct Grow {
  int max_ranks = 0;             // 0: never grow
  double after_s = -1;           // < 0: off
  std::int64_t after_steps = -1;  // < 0: off
  // Why capacity is back for a launch on `ranks` that resumed at `resumed_at`
  // (time) and `resumed_step`, now at `step`; empty while it is not.
  std::string due(int ranks, const fs::path& run_dir, double resumed_at, std::int64_t resumed_step,
                  std::int64_t step) const {
    if (ranks >= max_ranks) return "";
    if (std::error_code ec; fs::exists(run_dir / "grow", ec)) return "the file " + (run_dir / "grow").string();
    if (after_s >= 0 && now_s() - resumed_at >= after_s) return fmt::format("--grow-after {} s", after_s);
    if (after_steps >= 0 && step - resumed_step >= after_steps)
      return fmt::format("--grow-after-steps {}", after_steps);
    return "";
  }
};

int supervise(const Job& job, int ranks, int min_ranks, int max_restarts, int spares, const Grow& grow) {
  std::string why;
  const auto first = check(job, ranks, {}, &why);
  EXA_REQUIRE(first.has_value(), "the deck does not run on {} ranks:\n{}", ranks, why);
  const Layout base = first->layout;
  const fs::path run_dir = first->run_dir;
  const fs::path log_file = run_dir / "elastic.jsonl";
  Layout now = base;
  std::vector<std::string> extra;  // none on the first launch: the deck as given
  std::optional<Restart> pending;
  static const std::regex resumed("resumed from .* at step ([0-9]+)|(starting from step 0)");
  for (int restarts = 0;; ++restarts) {
    std::vector<std::string> argv = job.mpiexec;
    argv.insert(argv.end(), {"-n", std::to_string(now.ranks), job.examoe});
    for (const auto& a : job.args(extra)) argv.push_back(a);
    note(fmt::format("launching on {} ranks (dp {}, grad_accum {}, global batch {})", now.ranks, now.dp,
                     now.grad_accum, now.global_batch()));
    Cause cause;
    // Growing back: once this launch has resumed and capacity is back, the
    // job is asked to stop at the end of its step with a checkpoint
    // (SIGUSR1, examoe's stop signal: exit 75), and is relaunched larger.
    static const std::regex step_line("step +([0-9]+)/[0-9]+");
    bool resumed_here = restarts == 0;
    double resumed_at = now_s();
    std::int64_t resumed_step = 0;
    std::string grow_why;
    // Fault injection (EXAMOE_FAULT_*) is for the first launch only: a
    // relaunch must not fail again on purpose. Its pacing stays: a test that
    // holds a run until its grow signal holds the relaunch that grows.
    const std::vector<std::string> unset = restarts == 0 ? std::vector<std::string>{} : failure_injection();
    const auto end = exa::elastic::run_child(
        argv, unset,
        [&](bool is_err, const std::string& line) {
          fmt::print(is_err ? stderr : stdout, "{}\n", line);
          std::fflush(is_err ? stderr : stdout);
          cause.watch(line);
          std::smatch m;
          if (!resumed_here && std::regex_search(line, m, resumed)) {
            resumed_here = true;
            resumed_at = now_s();
            resumed_step = m[1].matched ? std::stoll(m[1].str()) : 0;
          } else if (resumed_here && grow_why.empty() && g_child > 0 && std::regex_search(line, m, step_line)) {
            grow_why = grow.due(now.ranks, run_dir, resumed_at, resumed_step, std::stoll(m[1].str()));
            if (!grow_why.empty()) {
              note(fmt::format("capacity is back ({}): stopping the job at its next step to grow to {} ranks",
                               grow_why, grow.max_ranks));
              // To the ranks themselves: Hydra's mpiexec, signalled, reports
              // 0 for a job whose ranks exit 75.
              const auto ranks = exa::elastic::descendants_named(g_child, fs::path(job.examoe).filename().string().substr(0, 15));
              for (const pid_t r : ranks) kill(r, SIGUSR1);
              if (ranks.empty()) kill(g_child, SIGUSR1);
            }
          }
          if (pending && !pending->written && std::regex_search(line, m, resumed)) {
            const std::int64_t step = m[1].matched ? std::stoll(m[1].str()) : 0;
            auto& rec = pending->record;
            rec["resumed_step"] = step;
            rec["lost_steps"] = std::max<std::int64_t>(0, rec["last_step"].get<std::int64_t>() - step);
            rec["downtime_s"] = now_s() - pending->died_at;
            append(log_file, *pending);
            note(fmt::format("restart {}: resumed at step {} on {} ranks, {} steps lost, {:.1f} s down",
                             rec["restart"].get<int>(), step, now.ranks, rec["lost_steps"].get<std::int64_t>(),
                             rec["downtime_s"].get<double>()));
          }
        },
        &g_child);
    const double died_at = now_s();
    if (pending) append(log_file, *pending);  // it died before resuming: the record as far as known
    if (end.ok() || g_stop != 0) return end.signal != 0 ? 128 + end.signal : end.exit_code;
    if (end.exit_code == 75 && !grow_why.empty()) {
      // Stopped with a checkpoint at our request: relaunch on the largest
      // valid size up to --max-ranks (the same one when none is larger).
      std::error_code ec;
      fs::remove(run_dir / "grow", ec);
      const std::int64_t last_step = last_logged_step(run_dir / "metrics.jsonl");
      const auto larger = exa::elastic::shrink(base, grow.max_ranks, now.ranks + 1, [&](const Layout& l) {
        auto sets = exa::elastic::overrides_for(l);
        sets.push_back("checkpoint.resume=true");
        std::string reason;
        return check(job, l.ranks, sets, &reason).has_value();
      });
      const Layout next = larger ? *larger : now;
      pending = Restart{nlohmann::json{{"restart", restarts + 1},
                                       {"event", "grow"},
                                       {"cause", {{"detail", "capacity back: " + grow_why}, {"exit_code", 75}}},
                                       {"last_step", last_step},
                                       {"resumed_step", nullptr},
                                       {"lost_steps", nullptr},
                                       {"downtime_s", nullptr},
                                       {"old_ranks", now.ranks},
                                       {"new_ranks", next.ranks},
                                       {"new_dp", next.dp},
                                       {"new_grad_accum", next.grad_accum}},
                        died_at, false};
      now = next;
      extra = exa::elastic::overrides_for(now);
      extra.push_back("checkpoint.resume=true");
      continue;
    }
    if (end.exit_code == 75) return 75;  // it stopped with a checkpoint on a signal (requeue, not a failure)
    note(fmt::format("the job on {} ranks ended with {}{}", now.ranks, end.describe(),
                     cause.detail.empty() ? "" : " (" + cause.detail + ")"));
    EXA_REQUIRE(restarts < max_restarts, "giving up after {} restarts (--max-restarts {})", restarts, max_restarts);
    const std::int64_t last_step = last_logged_step(run_dir / "metrics.jsonl");
    const auto candidate = [&](const Layout& l) {
      auto sets = exa::elastic::overrides_for(l);
      sets.push_back("checkpoint.resume=true");
      std::string reason;
      const bool ok = check(job, l.ranks, sets, &reason).has_value();
      if (!ok) note(fmt::format("{} ranks: not a valid layout: {}", l.ranks, reason));
      return ok;
    };
    // A hot spare replaces the failed node: the relaunch keeps the layout,
    // so no check is needed and the resume is a same-layout one.
    const bool on_spare = spares > 0;
    if (on_spare) --spares;
    const auto next = on_spare ? std::optional<Layout>(now)
                               : exa::elastic::shrink(base, now.ranks - 1, min_ranks, candidate);
    EXA_REQUIRE(next.has_value(),
                "no valid layout on {} to {} ranks keeps the global batch of {} sequences (tp {}, cp {}, pp {}, "
                "micro_batch {}): lower --min-ranks or change the deck",
                now.ranks - 1, min_ranks, base.global_batch(), base.tp, base.cp, base.pp, base.micro_batch);
    nlohmann::json cause_json{{"detail", cause.detail}};
    if (end.signal != 0) cause_json["signal"] = end.signal;
    else cause_json["exit_code"] = end.exit_code;
    pending = Restart{nlohmann::json{{"restart", restarts + 1},
                                     {"cause", cause_json},
                                     {"last_step", last_step},
                                     {"resumed_step", nullptr},
                                     {"lost_steps", nullptr},
                                     {"downtime_s", nullptr},
                                     {"old_ranks", now.ranks},
                                     {"new_ranks", next->ranks},
                                     {"new_dp", next->dp},
                                     {"new_grad_accum", next->grad_accum},
                                     {"spare", on_spare},
                                     {"spares_left", spares}},
                      died_at, false};
    if (on_spare)
      note(fmt::format("a spare node replaces the failed one ({} left): relaunching on {} ranks", spares, now.ranks));
    now = *next;
    extra = exa::elastic::overrides_for(now);
    extra.push_back("checkpoint.resume=true");
  }
}

std::string self_dir() {
  std::error_code ec;
  const auto exe = fs::read_symlink("/proc/self/exe", ec);
  return ec ? std::string(".") : exe.parent_path().string();
}

}  // namespace

int main(int argc, char** argv) {
  CLI::App app{
      "examoe-elastic: run examoe under mpiexec; when the job dies, relaunch it on the surviving ranks (dp shrinks, "
      "grad_accum grows so the global batch stays) from its newest checkpoint.\n"
      "  examoe-elastic [--ranks N] [--min-ranks M] [--spares S] [--max-ranks X] [--grow-after S] [--max-restarts R] DECK.toml "
      "[--set k=v]...\n"
      "  Growing back: with --max-ranks, a shrunk job is stopped with a checkpoint and relaunched larger once "
      "--grow-after seconds or --grow-after-steps steps have passed, or the file <run_dir>/grow exists."};
  Job job;
  int ranks = 1, min_ranks = 1, max_restarts = 10, spares = 0;
  Grow grow;
  std::string mpiexec = "mpiexec";
  job.examoe = self_dir() + "/examoe";
  app.add_option("deck", job.deck, "TOML input deck (see input/)")->required();
  app.add_option("--set", job.sets, "override a deck key, as for examoe (repeatable)")->allow_extra_args(false);
  app.add_option("--ranks", ranks, "ranks of the first launch")->check(CLI::Range(1, 1 << 24));
  app.add_option("--min-ranks", min_ranks, "fewest ranks a relaunch may use")->check(CLI::Range(1, 1 << 24));
  app.add_option("--spares", spares,
                 "hot spare nodes: each of the first N failures relaunches on the same ranks instead of shrinking")
      ->check(CLI::Range(0, 1 << 24));
  app.add_option("--max-restarts", max_restarts, "relaunches before giving up")->check(CLI::Range(0, 1 << 20));
  app.add_option("--max-ranks", grow.max_ranks,
                 "grow a shrunk job back up to this many ranks when capacity returns (default: no growing)")
      ->check(CLI::Range(1, 1 << 24));
  app.add_option("--grow-after", grow.after_s, "capacity returns this many seconds after a shrunk launch resumed")
      ->check(CLI::Range(0.0, 1e9));
  app.add_option("--grow-after-steps", grow.after_steps, "capacity returns after this many steps of a shrunk launch")
      ->check(CLI::Range(std::int64_t(0), std::int64_t(1) << 40));
  app.add_option("--mpiexec", mpiexec, "launcher command line, split at spaces (default: mpiexec)");
  app.add_option("--examoe", job.examoe, "the examoe binary (default: the one next to examoe-elastic)");
  if (const int rc = exa::driver::parse(app, argc, argv, 0, "examoe-elastic"); rc >= 0) return rc;
  std::istringstream words(mpiexec);
  for (std::string w; words >> w;) job.mpiexec.push_back(w);
  for (int sig : {SIGTERM, SIGINT, SIGUSR1}) std::signal(sig, forward);
  try {
    EXA_REQUIRE(!job.mpiexec.empty(), "--mpiexec is empty: give the launcher, e.g. --mpiexec mpiexec");
    EXA_REQUIRE(min_ranks <= ranks, "--min-ranks {} is above --ranks {}", min_ranks, ranks);
    EXA_REQUIRE(grow.max_ranks == 0 || grow.max_ranks >= ranks, "--max-ranks {} is below --ranks {}", grow.max_ranks,
                ranks);
    return supervise(job, ranks, min_ranks, max_restarts, spares, grow);
  } catch (const exa::Error& e) {
    exa::driver::print_error(0, "examoe-elastic", e.what());
    return 1;
  }
}
