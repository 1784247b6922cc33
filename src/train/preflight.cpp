#include "train/preflight.hpp"

#include "train/federated.hpp"
#include "train/distillation.hpp"

#include "train/init_from.hpp"

#include <algorithm>

#include <fmt/format.h>
#include <fmt/ranges.h>
#include <unistd.h>

#include <cerrno>
#include <cstring>
#include <filesystem>

#include "comm/process_grid.hpp"
#include "core/error.hpp"
#include "io/checkpoint/checkpoint.hpp"
#include "io/sampler.hpp"
#include "model/model_config.hpp"
#include "model/growth_schedule.hpp"
#include "model/parameter_specs.hpp"
#include "train/deck_dataset.hpp"
#include "train/deck_paths.hpp"
#include "train/supported_layout.hpp"

namespace exa::train {

namespace fs = std::filesystem;

namespace {

// Runs f; an exa::Error from it is re-thrown located at `keys` (io's messages
// name the file and the fix, not the deck line that chose it).
template <class F>
auto located(const deck::Config& cfg, std::initializer_list<std::string_view> keys, F&& f) {
  try {
    return f();
  } catch (const Error& e) {
    throw Error(fmt::format("{} {}", cfg.locate(keys), e.what()));
  }
}

std::string layout_line(const deck::Config& cfg) {
  require_supported_layout(cfg, false);
  const comm::GridSizes s =
      located(cfg, {"parallel.ranks_per_node", "parallel.dp", "parallel.ep"},
              [&] { return comm::resolve_grid_sizes(comm::grid_sizes_from_deck(cfg)); });
  return fmt::format("layout: world {} = pp {} x dp {} x cp {} x tp {}, ep {}{}", s.world, s.pp, s.dp, s.cp, s.tp,
                     s.ep, s.ranks_per_node > 0 ? fmt::format(", {} ranks per node", s.ranks_per_node) : "");
}

// One source: its file, tokens, split and how it is sampled.
std::string source_text(const deck::Config& cfg, const io::Sampler& data, const std::string& format) {
  const io::Dataset& d = data.data();
  std::error_code ec;
  const std::string path = fs::absolute(d.tokens().source(), ec).lexically_normal().string();
  std::string packing;
  if (const io::DocumentPacking* p = data.train_packing())
    packing = fmt::format("; packed: {} documents ({} split) into {} training sequences, {:.1f}% of rows filled",
                          p->documents(), p->split_documents(), p->sequences(),
                          100.0 * double(p->filled_rows()) / double(p->sequences() * p->seq_len()));
  if (const io::TokenBudget* b = data.budget()) {
    std::vector<std::string> buckets;
    for (std::size_t k = 0; k < b->lengths().size(); ++k)
      buckets.push_back(fmt::format("{} x {}: {} pieces", b->sequences_in(k), b->lengths()[k], b->pieces_in(k)));
    packing = fmt::format("; token budget {}: {}", cfg.get_int("train.batch_tokens"), fmt::join(buckets, ", "));
  }
  return fmt::format("{} ({}): {} tokens, vocabulary {} (model.vocab_size {}); {} for training, {} held out ({} "
                     "validation {} of {}){}",
                     path, format, d.n_tokens(), d.tokens().vocab(), cfg.get_int("model.vocab_size"), d.n_train(),
                     d.n_val(), data.n_val_windows(), data.packed() ? "sequences" : "windows", d.seq_len(), packing);
}

std::string data_line(const deck::Config& cfg) {
  if (const auto sites = cfg.get_int("federated.sites"); sites > 1) {
    std::vector<std::string> parts;
    for (int k = 0; k < int(sites); ++k) {
      const deck::Config site = federated_site_config(cfg, k);
      const io::Sampler data = deck_sampler(site, located(cfg, {"federated.site_data"}, [&] {
                                              try {
                                                return open_deck_dataset(site);
                                              } catch (const Error& e) {
                                                throw Error(fmt::format("federated site {} has no data (entry {} of "
                                                                        "federated.site_data): {}",
                                                                        k, k + 1, e.what()));
                                              }
                                            }));
      parts.push_back(fmt::format("site {}: {}", k, source_text(site, data, site.get_string("data.format"))));
    }
    return fmt::format("data: {} federated sites: {}", sites, fmt::join(parts, "; "));
  }
  if (!cfg.streams().empty()) {
    // Each stream's own errors name its table's line (open_deck_streams).
    const io::StreamMixture mix = open_deck_streams(cfg);
    std::vector<std::string> parts;
    for (std::size_t k = 0; k < mix.size(); ++k)
      parts.push_back(fmt::format("{} (weight {:g}): {}", mix.stream(k).task, mix.stream(k).weight,
                                  source_text(cfg, mix.stream(k).sampler, cfg.streams()[k].format)));
    return fmt::format("data: {} streams: {}", mix.size(), fmt::join(parts, "; "));
  }
  const std::initializer_list<std::string_view> keys = {"data.path", "data.format", "model.vocab_size",
                                                        "model.seq_len", "data.val_fraction"};
  const io::Sampler data = deck_sampler(cfg, located(cfg, keys, [&] { return open_deck_dataset(cfg); }));
  return "data: " + source_text(cfg, data, cfg.get_string("data.format"));
}

// `dir` exists as a writable directory, or its nearest existing ancestor is
// one (the run creates the rest).
std::string writable_line(const deck::Config& cfg, const char* key, const std::string& dir) {
  const std::string at = cfg.locate({key});
  fs::path p = fs::absolute(dir).lexically_normal();
  const fs::path wanted = p;
  std::error_code ec;
  while (!fs::exists(p, ec) && p.has_parent_path() && p != p.parent_path()) p = p.parent_path();
  if (!fs::is_directory(p, ec)) {
    const std::string what = p == wanted ? fmt::format("{} exists and is not a directory", p.string())
                                         : fmt::format("{} is not a directory, so {} cannot be created", p.string(),
                                                       wanted.string());
    throw Error(fmt::format("{} {} = \"{}\": {}; choose another {}", at, key, cfg.get_string(key), what, key));
  }
  EXA_REQUIRE(::access(p.c_str(), W_OK | X_OK) == 0,
              "{} {} = \"{}\": {} is not writable ({}); choose a directory this user can write (e.g. on the "
              "scratch file system) or fix its permissions",
              at, key, cfg.get_string(key), p.string(), std::strerror(errno));
  return fmt::format("{}: {} is writable{}", key, wanted.string(), p == wanted ? "" : " (it will be created)");
}

std::string resume_line(const deck::Config& cfg, const std::string& ckpt_dir) {
  const std::initializer_list<std::string_view> keys = {"checkpoint.resume", "checkpoint.dir", "output.run_dir"};
  if (located(cfg, keys, [&] { return io::list_checkpoints(ckpt_dir); }).empty()) {
    return fmt::format("checkpoint.resume: no complete checkpoint under {} yet; the run starts from step 0",
                       ckpt_dir);
  }
  const io::CheckpointInfo info = located(cfg, keys, [&] {
    io::CheckpointInfo i = io::inspect_checkpoint(ckpt_dir);
    auto specs = model::parameter_specs(model::model_config_at(cfg, std::int64_t(i.meta.step)));
    if (checkpoints_hold_adapters_only(cfg))  // LoRA from train.init_from: the frozen model is read from there
      specs.erase(std::remove_if(specs.begin(), specs.end(), [](const auto& s) { return !s.trainable; }),
                  specs.end());
    io::require_matching_model(i, specs, true);
    return i;
  });
  const auto steps = static_cast<std::uint64_t>(cfg.get_int("train.steps"));
  const std::string done =
      info.meta.step >= steps ? fmt::format("; it is at or past train.steps = {}: nothing to train", steps) : "";
  // Inside a distillation window the resume reads the teacher too.
  std::string teacher;
  if (const auto event = distillation_event(cfg, std::int64_t(info.meta.step)); event > 0) {
    const std::string dir = Teacher::snapshot_step_dir(ckpt_dir, event);
    located(cfg, {"growth.distill_steps", "checkpoint.resume"}, [&] {
      io::CheckpointInfo t;
      try {
        t = io::inspect_checkpoint(dir);
      } catch (const Error& e) {
        throw Error(missing_teacher(event, cfg.get_int("growth.distill_steps"), dir, e.what()));
      }
      io::require_matching_model(t, model::parameter_specs(model::model_config_at(cfg, event - 1)), false);
      return 0;
    });
    teacher = fmt::format("; inside the distillation window of the growth after step {}, its teacher {} is complete",
                          event, dir);
  }
  return fmt::format("checkpoint.resume: {} (step {}) is complete and matches the model{}{}", info.meta.directory,
                     info.meta.step, done, teacher);
}

// Expert growth's schedule: the counts, the steps they come at, and the
// experts each EP rank holds (the deck check has refused counts ep does not
// divide).
std::string growth_line(const deck::Config& cfg) {
  const auto g = model::GrowthSchedule::from_deck(cfg);
  const auto counts = g.counts();
  std::string steps;
  for (std::size_t i = 1; i < counts.size(); ++i) steps += fmt::format("{}{}", i > 1 ? ", " : "", std::int64_t(i) * g.every);
  std::string line = fmt::format("growth: {} experts per MoE layer", fmt::join(counts, " -> "));
  line += fmt::format(" after steps {} ({}); ", steps, model::to_string(g.init));
  const auto ep = cfg.get_int("parallel.ep");
  line += ep > 1 ? fmt::format("{} to {} per EP rank (ep = {})", counts.front() / ep, counts.back() / ep, ep)
                 : std::string("every rank holds them all (ep = 1)");
  if (const auto n = cfg.get_int("growth.distill_steps"); n > 0)
    line += fmt::format("; the {} steps after each event distil from the model before it (coef {:g}, temperature "
                        "{:g}; its snapshot goes to <checkpoint dir>/teacher/)",
                        n, cfg.get_float("growth.distill_coef"), cfg.get_float("growth.distill_temperature"));
  return line;
}

}  // namespace

std::vector<std::string> preflight(const deck::Config& cfg) {
  std::vector<std::string> lines;
  lines.push_back(layout_line(cfg));
  lines.push_back(data_line(cfg));
  lines.push_back(writable_line(cfg, "output.run_dir", cfg.get_string("output.run_dir")));
  const bool resume = cfg.get_bool("checkpoint.resume");
  if (resume || cfg.get_int("checkpoint.every") > 0) {
    lines.push_back(writable_line(cfg, "checkpoint.dir", deck_checkpoint_dir(cfg)));
  }
  if (resume) lines.push_back(resume_line(cfg, deck_checkpoint_dir(cfg)));
  if (model::GrowthSchedule::from_deck(cfg).enabled()) lines.push_back(growth_line(cfg));
  return lines;
}

}  // namespace exa::train
