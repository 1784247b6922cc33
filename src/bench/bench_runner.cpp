#include "bench/bench_runner.hpp"

#include <dlfcn.h>
#include <fmt/format.h>
#include <stdlib.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <functional>
#include <map>
#include <nlohmann/json.hpp>
#include <numeric>
#include <tuple>

#include "core/build_info.hpp"
#include "core/error.hpp"
#include "core/log.hpp"
#include "core/profiling.hpp"
#include "io/dataset.hpp"
#include "io/sampler.hpp"
#include "model/parameter_store.hpp"
#include "model/transformer.hpp"
#include "model/weights.hpp"
#include "optim/optimizer.hpp"
#include "train/deck_dataset.hpp"
#include "train/device_batch.hpp"
#include "train/flops.hpp"
#include "kernels/gemm.hpp"

namespace exa::bench {

namespace fs = std::filesystem;

namespace {

// Phase names of this file's own regions (the model's are forward/..., backward/...).
constexpr const char* kIo = "step/io";
constexpr const char* kForward = "step/forward";
constexpr const char* kBackward = "step/backward";
constexpr const char* kOptimizer = "step/optimizer";

double load_average() {
  std::ifstream f("/proc/loadavg");
  double l = -1;
  if (!(f >> l)) return -1;
  return l;
}

// "OpenBLAS 0.3.21 ... Haswell" when this process's BLAS is OpenBLAS, else "".
std::string blas_config() {
  using StrFn = char* (*)();
  std::string s;
  if (auto cfg = reinterpret_cast<StrFn>(dlsym(RTLD_DEFAULT, "openblas_get_config"))) s = cfg();
  if (auto core = reinterpret_cast<StrFn>(dlsym(RTLD_DEFAULT, "openblas_get_corename"))) s += std::string(" core=") + core();
  return s;
}

// OpenBLAS threads: pinned to 1 (one core, as the PyTorch side) when this
// process's BLAS is OpenBLAS; returns the count in effect (0 = unknown BLAS).
int pin_blas_threads() {
  using SetFn = void (*)(int);
  using GetFn = int (*)();
  if (auto set = reinterpret_cast<SetFn>(dlsym(RTLD_DEFAULT, "openblas_set_num_threads"))) set(1);
  if (auto get = reinterpret_cast<GetFn>(dlsym(RTLD_DEFAULT, "openblas_get_num_threads"))) return get();
  return 0;
}

double median(std::vector<double> v) {
  if (v.empty()) return 0;
  std::sort(v.begin(), v.end());
  const std::size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

void summarise(Timing& t) {
  t.wall_median = median(t.wall);
  t.cpu_median = median(t.cpu);
  t.wall_best = t.wall.empty() ? 0 : *std::min_element(t.wall.begin(), t.wall.end());
  t.cpu_best = t.cpu.empty() ? 0 : *std::min_element(t.cpu.begin(), t.cpu.end());
}

// sgemm_peak.cpp's measurement (square n x n 'N','T' fp32 gemm through the
// model's wrapper, best of repeats for `seconds`), in both clocks: returns
// {wall GFLOP/s, CPU-time GFLOP/s}.
std::pair<double, double> sgemm_peak_two_clocks(int n, double seconds) {
  Kokkos::Profiling::pushRegion("exa::sgemm_peak");
  View2<float> a("peak_a", n, n), b("peak_b", n, n), c("peak_c", n, n);
  Kokkos::deep_copy(a, 0.5f);
  Kokkos::deep_copy(b, 0.25f);
  kernels::gemm('N', 'T', 1.0f, a, b, 0.0f, c);
  Kokkos::fence();
  double best_wall = 1e30, best_cpu = 1e30;
  const double stop = wall_seconds() + seconds;
  int reps = 0;
  do {
    const double w0 = wall_seconds(), c0 = process_cpu_seconds();
    kernels::gemm('N', 'T', 1.0f, a, b, 0.0f, c);
    Kokkos::fence();
    best_wall = std::min(best_wall, wall_seconds() - w0);
    best_cpu = std::min(best_cpu, process_cpu_seconds() - c0);
    ++reps;
  } while (wall_seconds() < stop || reps < 5);
  Kokkos::Profiling::popRegion();
  const double flop = 2.0 * double(n) * n * n;
  return {flop / best_wall * 1e-9, flop / std::max(best_cpu, 1e-9) * 1e-9};
}

std::string shell_quote(const std::string& s) {
  std::string out = "'";
  for (char c : s) {
    if (c == '\'')
      out += "'\\''";
    else
      out += c;
  }
  return out + "'";
}

// One training step exactly as Trainer::train_step does it at one rank,
// with this file's phase regions around its parts.
struct Step {
  const deck::Config& cfg;
  model::ModelConfig mcfg;
  model::ParameterStore store;
  model::Transformer<float> model;
  model::Weights<float, Device> w, g;
  optim::Optimizer opt;
  io::Sampler sampler;
  std::int64_t micro_batch, grad_accum;
  train::DeviceBatch batch;
  std::vector<std::int32_t> tokens_log;  // every micro-batch's inputs then targets, for PyTorch

  explicit Step(const deck::Config& c)
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

  void upload(const io::Batch& b) {
    batch.upload(b);
    tokens_log.insert(tokens_log.end(), b.inputs.begin(), b.inputs.end());
    tokens_log.insert(tokens_log.end(), b.targets.begin(), b.targets.end());
  }

  // Returns (mean loss, worst imbalance).
  std::pair<double, double> run(std::int64_t step) {
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
};

bool starts_with(const std::string& s, const std::string& p) { return s.rfind(p, 0) == 0; }

// Inclusive (cpu, wall) per region name, per step.
using Times = std::map<std::string, std::pair<double, double>>;

// The phase tree, per step:
//   io (step/io)
//   forward (step/forward) > forward/embed, forward/attn, forward/moe > forward/moe/router, ...
//   backward (step/backward) > backward/...
//   optimizer (step/optimizer) > exa::optim::adamw
// with "(rest)" rows for the time of a phase outside its sub-phases, and for
// leaves and rests the split of their exclusive CPU time into gemm, Kokkos
// kernels, deep copies and host code.
std::vector<PhaseRow> phase_rows(const Times& t, const KernelTable& kt, bool have_kernels, double steps) {
  auto get = [&](const std::string& n) {
    const auto it = t.find(n);
    return it == t.end() ? std::make_pair(0.0, 0.0) : std::make_pair(it->second.first / steps, it->second.second / steps);
  };
  auto split = [&](PhaseRow& row, const std::string& phase) {
    row.leaf = have_kernels;
    if (!have_kernels) return;
    double gemm = 0, kern = 0, copy = 0;
    for (const auto& [key, st] : kt) {
      if (key.first != phase) continue;
      (key.second == "gemm" ? gemm : key.second == "deep_copy" ? copy : kern) += st.cpu;
    }
    row.gemm = gemm / steps;
    row.kernels = kern / steps;
    row.copy = copy / steps;
    row.host = std::max(0.0, row.cpu - row.gemm - row.kernels - row.copy);
  };
  // Model phases one '/'-level below `prefix` (which ends in '/').
  auto children = [&](const std::string& prefix) {
    const auto depth = std::count(prefix.begin(), prefix.end(), '/');
    std::vector<std::string> out;
    for (const auto& [name, v] : t)
      if (starts_with(name, prefix) && std::count(name.begin(), name.end(), '/') == depth) out.push_back(name);
    return out;
  };
  std::vector<PhaseRow> rows;
  // A phase and its subtree; `region` is the timer, `kids` its sub-phases.
  std::function<void(const std::string&, const std::string&, int, const std::vector<std::string>&)> emit;
  emit = [&](const std::string& label, const std::string& region, int depth, const std::vector<std::string>& kids) {
    PhaseRow row;
    row.name = label;
    row.depth = depth;
    std::tie(row.cpu, row.wall) = get(region);
    if (kids.empty()) {
      split(row, region);
      rows.push_back(row);
      return;
    }
    rows.push_back(row);
    PhaseRow rest;
    rest.name = label + " (rest)";
    rest.depth = depth + 1;
    rest.cpu = row.cpu;
    rest.wall = row.wall;
    for (const auto& k : kids) {
      const auto sub = k == "exa::optim::adamw" ? std::vector<std::string>{} : children(k + "/");
      emit(k, k, depth + 1, sub);
      const auto [c, w] = get(k);
      rest.cpu -= c;
      rest.wall -= w;
    }
    rest.cpu = std::max(0.0, rest.cpu);
    rest.wall = std::max(0.0, rest.wall);
    split(rest, region);
    rows.push_back(rest);
  };
  emit("io (sample + upload)", kIo, 0, {});
  emit("forward", kForward, 0, children("forward/"));
  emit("backward", kBackward, 0, children("backward/"));
  emit("optimizer", kOptimizer, 0, {"exa::optim::adamw"});
  return rows;
}

std::vector<KernelRow> kernel_rows(const KernelTable& kt, double steps) {
  std::map<std::string, KernelRow> by;
  std::map<std::string, std::vector<std::pair<double, std::string>>> where;
  for (const auto& [key, st] : kt) {
    auto& r = by[key.second];
    r.kernel = key.second;
    r.cpu += st.cpu / steps;
    r.wall += st.wall / steps;
    r.calls += double(st.calls) / steps;
    where[key.second].emplace_back(st.cpu, key.first);
  }
  std::vector<KernelRow> out;
  for (auto& [name, r] : by) {
    auto& w = where[name];
    std::sort(w.rbegin(), w.rend());
    for (std::size_t i = 0; i < w.size() && i < 3; ++i) r.phases += (i ? ", " : "") + w[i].second;
    if (w.size() > 3) r.phases += fmt::format(" +{}", w.size() - 3);
    out.push_back(r);
  }
  std::sort(out.begin(), out.end(), [](const KernelRow& a, const KernelRow& b) { return a.cpu > b.cpu; });
  return out;
}

void read_timing(const nlohmann::json& j, const char* wall, const char* cpu, Timing& t) {
  t.wall = j.at(wall).get<std::vector<double>>();
  t.cpu = j.at(cpu).get<std::vector<double>>();
  summarise(t);
}

void run_torch(const deck::Config& cfg, const BenchOptions& opt, const Step& step, BenchResult& r) {
  auto& t = r.torch;
  std::string script = opt.torch_script;
  if (script.empty()) script = (fs::path(EXAMOE_SOURCE_DIR) / "tests/reference/bench_torch.py").string();
  if (!fs::exists(script)) {
    t.error = fmt::format("{} not found (pass --torch-script)", script);
    return;
  }
  fs::path dir = opt.workdir;
  const bool temp = dir.empty();
  if (temp) {
    std::string tmpl = (fs::temp_directory_path() / "examoe-bench-XXXXXX").string();
    if (mkdtemp(tmpl.data()) == nullptr) {
      t.error = "could not create a temporary directory";
      return;
    }
    dir = tmpl;
  } else {
    fs::create_directories(dir);
  }
  const fs::path cfg_json = dir / "cfg.json", tokens = dir / "tokens.bin";
  {
    std::ofstream f(cfg_json);
    f << cfg.to_json(1) << "\n";
  }
  {
    std::ofstream f(tokens, std::ios::binary);
    f.write(reinterpret_cast<const char*>(step.tokens_log.data()),
            static_cast<std::streamsize>(step.tokens_log.size() * sizeof(std::int32_t)));
  }
  const std::string cmd = fmt::format(
      "OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 MKL_NUM_THREADS=1 PYTHONDONTWRITEBYTECODE=1 {} {} --config {} "
      "--steps {} --warmup {} --tokens {}",
      shell_quote(opt.python), shell_quote(script), shell_quote(cfg_json.string()), r.steps, r.warmup,
      shell_quote(tokens.string()));
  log::info("examoe-bench: PyTorch: {}", cmd);
  std::fflush(stdout);
  t.load_before = load_average();
  std::string out;
  int status = -1;
  if (FILE* p = popen(cmd.c_str(), "r")) {
    char buf[4096];
    std::size_t n;
    while ((n = std::fread(buf, 1, sizeof buf, p)) > 0) out.append(buf, n);
    status = pclose(p);
  }
  if (temp) {
    std::error_code ec;
    fs::remove_all(dir, ec);
  }
  // Its JSON line is the last stdout line that starts with '{'.
  std::string line;
  for (std::size_t end = out.size(); end > 0;) {
    const std::size_t nl = out.rfind('\n', end - 1);
    const std::size_t b = nl == std::string::npos ? 0 : nl + 1;
    if (b < end && out[b] == '{') {
      line = out.substr(b, end - b);
      break;
    }
    if (nl == std::string::npos) break;
    end = nl;
  }
  if (status != 0 || line.empty()) {
    t.error = fmt::format("`{}` exited with status {}{}", cmd, status, line.empty() ? " and no JSON line" : "");
    return;
  }
  try {
    const auto j = nlohmann::json::parse(line);
    t.json = line;
    t.version = j.value("torch_version", "");
    read_timing(j, "step_s", "step_cpu_s", t.step);
    const auto tokens_per_step = j.at("tokens_per_step").get<std::int64_t>();
    EXA_REQUIRE(tokens_per_step == r.tokens_per_step, "PyTorch trained {} tokens per step, ExaMoE {}",
                tokens_per_step, r.tokens_per_step);
    const double tok = double(tokens_per_step);
    t.tokens_per_s = tok / t.step.wall_median;
    t.tokens_per_s_best = tok / t.step.wall_best;
    t.tokens_per_s_cpu = tok / t.step.cpu_median;
    t.tokens_per_s_cpu_best = tok / t.step.cpu_best;
    t.sgemm_gflops = j.value("sgemm_gflops", 0.0);
    t.sgemm_gflops_cpu = j.value("sgemm_gflops_cpu", 0.0);
    t.ran = true;
  } catch (const std::exception& e) {
    t.error = fmt::format("could not read PyTorch's JSON line: {}", e.what());
  }
}

}  // namespace

BenchResult run_bench(const deck::Config& cfg, const BenchOptions& opt) {
  EXA_REQUIRE(opt.steps >= 1, "examoe-bench: --steps must be at least 1, not {}", opt.steps);
  EXA_REQUIRE(opt.warmup >= 0, "examoe-bench: --warmup must be at least 0, not {}", opt.warmup);
  for (const char* k : {"parallel.tp", "parallel.pp", "parallel.cp", "parallel.ep"})
    EXA_REQUIRE(cfg.get_int(k) == 1, "examoe-bench runs one rank: {} = {}; set {} = 1", k, cfg.get_int(k), k);
  EXA_REQUIRE(cfg.get_string("precision.compute") == "fp32",
              "examoe-bench: precision.compute = \"{}\" is not available in this build; use fp32",
              cfg.get_string("precision.compute"));
  BenchResult r;
  r.deck = cfg.deck_path();
  r.steps = opt.steps;
  r.warmup = opt.warmup;
  r.exec_space = default_exec_space();
  r.blas_threads = pin_blas_threads();
  r.blas = blas_config();
#if defined(__x86_64__) || defined(__i386__)
  if (r.blas.find("core=Prescott") != std::string::npos &&
      (__builtin_cpu_supports("avx512f") || __builtin_cpu_supports("avx2")))
    log::warn("examoe-bench: OpenBLAS runs its generic Prescott (SSE3) kernels on a CPU with {}: gemm is several "
              "times slower than it could be, for PyTorch too; set OPENBLAS_CORETYPE={} (scripts/bench.sh does)",
              __builtin_cpu_supports("avx512f") ? "AVX-512" : "AVX2",
              __builtin_cpu_supports("avx512f") ? "SkylakeX" : "Haswell");
#endif
  r.load_before = load_average();

  Step step(cfg);
  const auto& m = step.mcfg;
  r.micro_batch = step.micro_batch;
  r.grad_accum = step.grad_accum;
  r.seq_len = m.seq_len;
  r.tokens_per_step = step.micro_batch * step.grad_accum * m.seq_len;
  r.params = step.store.local_numel();
  const train::FlopCount fc = train::count_flops(m);
  r.active_params = fc.active_params;
  r.flops_per_token = fc.per_token_train;
  r.attn_flops_per_token = fc.per_token_train - 6 * fc.active_params;
  log::info("examoe-bench: {} on 1 rank ({}, BLAS threads {}): {:.2f}M parameters ({:.2f}M active per token), "
            "{} tokens per step, {:.1f} MFLOP per token; {} warmup + {} timed steps; load average {:.2f}",
            r.deck, r.exec_space, r.blas_threads, double(r.params) / 1e6, r.active_params / 1e6,
            r.tokens_per_step, r.flops_per_token / 1e6, r.warmup, r.steps, r.load_before);

  for (std::int64_t s = 0; s < opt.warmup; ++s) {
    const double w0 = wall_seconds(), c0 = process_cpu_seconds();
    const auto [loss, imb] = step.run(s);
    r.losses.push_back(loss);
    log::info("examoe-bench: warmup step {}: {:.3f} s wall, {:.3f} s CPU, loss {:.4f}", s, wall_seconds() - w0,
              process_cpu_seconds() - c0, loss);
  }
  std::tie(r.sgemm_gflops, r.sgemm_gflops_cpu) = sgemm_peak_two_clocks(1024, 0.5);
  log::info("examoe-bench: sgemm peak (n = 1024, one core): {:.1f} GFLOP/s wall, {:.1f} in CPU time",
            r.sgemm_gflops, r.sgemm_gflops_cpu);

  phase_timers().reset();
  if (opt.kernels) {
    r.have_profile = KernelProfiler::start();
    if (!r.have_profile) log::warn("examoe-bench: a Kokkos Tools library is loaded: no per-kernel table");
    KernelProfiler::reset();
  }
  for (std::int64_t s = opt.warmup; s < opt.warmup + opt.steps; ++s) {
    const double w0 = wall_seconds(), c0 = process_cpu_seconds();
    const auto [loss, imb] = step.run(s);
    const double dw = wall_seconds() - w0, dc = process_cpu_seconds() - c0;
    r.step.wall.push_back(dw);
    r.step.cpu.push_back(dc);
    r.losses.push_back(loss);
    r.imbalance = std::max(r.imbalance, imb);
    log::info("examoe-bench: step {}: {:.3f} s wall, {:.3f} s CPU ({:.1f} / {:.1f} tokens/s), loss {:.4f}", s, dw,
              dc, double(r.tokens_per_step) / dw, double(r.tokens_per_step) / dc, loss);
  }
  const KernelTable kt = r.have_profile ? KernelProfiler::kernels() : KernelTable{};
  Times times;
  if (r.have_profile) {
    for (const auto& [name, st] : KernelProfiler::regions()) times[name] = {st.cpu, st.wall};
  } else {
    for (const auto& [name, w] : phase_timers().all()) times[name] = {0.0, w};
  }
  KernelProfiler::stop();
  std::tie(r.sgemm_gflops_after, r.sgemm_gflops_cpu_after) = sgemm_peak_two_clocks(1024, 0.5);
  r.load_after = load_average();

  summarise(r.step);
  const double tok = double(r.tokens_per_step);
  r.tokens_per_s = tok / r.step.wall_median;
  r.tokens_per_s_best = tok / r.step.wall_best;
  r.tokens_per_s_cpu = tok / r.step.cpu_median;
  r.tokens_per_s_cpu_best = tok / r.step.cpu_best;
  r.gflops = r.flops_per_token * r.tokens_per_s * 1e-9;
  r.gflops_cpu = r.flops_per_token * r.tokens_per_s_cpu * 1e-9;
  r.mfu = r.sgemm_gflops > 0 ? r.gflops / r.sgemm_gflops : 0;
  r.mfu_cpu = r.sgemm_gflops_cpu > 0 ? r.gflops_cpu / r.sgemm_gflops_cpu : 0;

  const double n = double(opt.steps);
  r.phases = phase_rows(times, kt, r.have_profile, n);
  r.kernels = kernel_rows(kt, n);
  // FLOP rates of the two kinds of matmul work: every gemm is a model
  // matmul (6 x active params per token), and the attention kernels do the
  // causal score and value products (q.k and p.v over j <= i: 4 hd FLOPs per
  // pair forward, twice that backward).
  const double pairs = 0.5 * double(m.seq_len) * double(m.seq_len + 1);
  const double seqs = double(r.micro_batch * r.grad_accum);
  r.gemm_gflop = 6 * r.active_params * tok * 1e-9;
  r.attn_fwd_gflop = 4.0 * double(m.head_dim()) * pairs * double(m.n_heads) * seqs * double(m.n_layers) * 1e-9;
  for (auto& k : r.kernels) {
    if (k.kernel == "gemm") {
      k.gflop = r.gemm_gflop;
      r.gemm_cpu = k.cpu;
    } else if (k.kernel == "exa::attention::forward") {
      k.gflop = r.attn_fwd_gflop;
      r.attn_fwd_cpu = k.cpu;
    } else if (starts_with(k.kernel, "exa::attention::backward")) {
      r.attn_bwd_cpu += k.cpu;
    }
  }
  if (r.gemm_cpu > 0) r.gemm_gflops = r.gemm_gflop / r.gemm_cpu;
  if (r.attn_fwd_cpu > 0) r.attn_fwd_gflops = r.attn_fwd_gflop / r.attn_fwd_cpu;
  if (r.attn_bwd_cpu > 0) r.attn_bwd_gflops = 2 * r.attn_fwd_gflop / r.attn_bwd_cpu;

  if (opt.torch) {
    run_torch(cfg, opt, step, r);
    if (r.torch.ran) {
      r.ratio = r.tokens_per_s_cpu / r.torch.tokens_per_s_cpu;
      r.ratio_wall = r.tokens_per_s / r.torch.tokens_per_s;
      r.ratio_best = r.tokens_per_s_cpu_best / r.torch.tokens_per_s_cpu_best;
      r.ratio_wall_best = r.tokens_per_s_best / r.torch.tokens_per_s_best;
    } else {
      log::warn("examoe-bench: no PyTorch comparison: {}", r.torch.error);
    }
  }
  return r;
}

namespace {

std::string list(const std::vector<double>& v) {
  std::string s;
  for (double x : v) s += fmt::format("{}{:.3f}", s.empty() ? "" : " ", x);
  return s;
}

}  // namespace

std::string format_report(const BenchResult& r) {
  std::string s;
  auto line = [&](const std::string& l) { s += l + "\n"; };
  line(fmt::format("== examoe-bench: {} ==", r.deck));
  line(fmt::format("{} tokens/step (micro_batch {} x grad_accum {} x seq_len {}), {:.2f}M params, "
                   "{:.2f}M active/token, {:.1f} MFLOP/token (attention {:.1f})",
                   r.tokens_per_step, r.micro_batch, r.grad_accum, r.seq_len, double(r.params) / 1e6,
                   r.active_params / 1e6, r.flops_per_token / 1e6, r.attn_flops_per_token / 1e6));
  line(fmt::format("ExaMoE steps, wall (s): {}   median {:.3f}  best {:.3f}", list(r.step.wall), r.step.wall_median,
                   r.step.wall_best));
  line(fmt::format("ExaMoE steps, CPU  (s): {}   median {:.3f}  best {:.3f}   (core share {:.0f}%)",
                   list(r.step.cpu), r.step.cpu_median, r.step.cpu_best,
                   100 * r.step.cpu_median / std::max(r.step.wall_median, 1e-12)));
  if (r.torch.ran) {
    line(fmt::format("PyTorch steps, wall (s): {}   median {:.3f}  best {:.3f}", list(r.torch.step.wall),
                     r.torch.step.wall_median, r.torch.step.wall_best));
    line(fmt::format("PyTorch steps, CPU  (s): {}   median {:.3f}  best {:.3f}   (core share {:.0f}%)",
                     list(r.torch.step.cpu), r.torch.step.cpu_median, r.torch.step.cpu_best,
                     100 * r.torch.step.cpu_median / std::max(r.torch.step.wall_median, 1e-12)));
  }
  line(fmt::format("load average (1 min): {:.2f} before, {:.2f} after ExaMoE{}; BLAS threads {}; Kokkos {}",
                   r.load_before, r.load_after,
                   r.torch.ran ? fmt::format(", {:.2f} before PyTorch", r.torch.load_before) : std::string(),
                   r.blas_threads, r.exec_space));
  if (!r.blas.empty()) line(fmt::format("BLAS: {}", r.blas));
  line("");
  line(fmt::format("  {:<22} {:>12} {:>12}", "", "wall", "CPU time"));
  line(fmt::format("  {:<22} {:12.1f} {:12.1f}   (best step {:.1f} / {:.1f})", "tokens/s", r.tokens_per_s,
                   r.tokens_per_s_cpu, r.tokens_per_s_best, r.tokens_per_s_cpu_best));
  line(fmt::format("  {:<22} {:12.2f} {:12.2f}", "achieved GFLOP/s", r.gflops, r.gflops_cpu));
  line(fmt::format("  {:<22} {:12.2f} {:12.2f}   (one core, n = 1024; after the steps {:.2f} / {:.2f})",
                   "sgemm peak GFLOP/s", r.sgemm_gflops, r.sgemm_gflops_cpu, r.sgemm_gflops_after,
                   r.sgemm_gflops_cpu_after));
  line(fmt::format("  {:<22} {:11.1f}% {:11.1f}%", "MFU", 100 * r.mfu, 100 * r.mfu_cpu));
  if (r.torch.ran) {
    line(fmt::format("  {:<22} {:12.1f} {:12.1f}   (best step {:.1f} / {:.1f}; torch {}, 1 thread, sgemm {:.1f} / {:.1f})",
                     "PyTorch tokens/s", r.torch.tokens_per_s, r.torch.tokens_per_s_cpu, r.torch.tokens_per_s_best,
                     r.torch.tokens_per_s_cpu_best, r.torch.version, r.torch.sgemm_gflops, r.torch.sgemm_gflops_cpu));
    line(fmt::format("  {:<22} {:12.3f} {:12.3f}   (best/best {:.3f} / {:.3f})", "ratio ExaMoE/PyTorch",
                     r.ratio_wall, r.ratio, r.ratio_wall_best, r.ratio_best));
    line(fmt::format("  -> ExaMoE is {} PyTorch (CPU-time medians, the measure robust to load)",
                     r.ratio >= 1 ? "at least as fast as" : "SLOWER than"));
  } else {
    line(fmt::format("  PyTorch: not run{}", r.torch.error.empty() ? "" : ": " + r.torch.error));
  }
  line("");
  double step_cpu = 0, step_wall = 0;
  for (const auto& p : r.phases)
    if (p.depth == 0) {
      step_cpu += p.cpu;
      step_wall += p.wall;
    }
  const double mean_cpu = std::accumulate(r.step.cpu.begin(), r.step.cpu.end(), 0.0) / double(r.step.cpu.size());
  const double mean_wall = std::accumulate(r.step.wall.begin(), r.step.wall.end(), 0.0) / double(r.step.wall.size());
  const bool cpu = r.have_profile;
  const double denom = cpu ? mean_cpu : mean_wall;
  line(fmt::format("Per phase, s per step (mean of {} steps); share of the mean step ({:.3f} s {}); "
                   "gemm/kernels/copy/host split the phase's own CPU time",
                   r.steps, denom, cpu ? "CPU" : "wall"));
  line(fmt::format("  {:<40} {:>8} {:>8} {:>6} |{:>8} {:>8} {:>7} {:>7}", "phase", "CPU", "wall", "share", "gemm",
                   "kernels", "copy", "host"));
  for (const auto& p : r.phases) {
    const std::string name = std::string(2 * std::size_t(p.depth), ' ') + p.name;
    const double share = 100 * (cpu ? p.cpu : p.wall) / denom;
    std::string l = fmt::format("  {:<40} {:>8} {:8.4f} {:5.1f}% |", name, cpu ? fmt::format("{:8.4f}", p.cpu) : "-",
                                p.wall, share);
    if (p.leaf) l += fmt::format("{:8.4f} {:8.4f} {:7.4f} {:7.4f}", p.gemm, p.kernels, p.copy, p.host);
    line(l);
  }
  line(fmt::format("  {:<40} {:>8} {:8.4f} {:5.1f}% |", "(outside the phases)",
                   cpu ? fmt::format("{:8.4f}", std::max(0.0, mean_cpu - step_cpu)) : "-",
                   std::max(0.0, mean_wall - step_wall),
                   100 * std::max(0.0, cpu ? mean_cpu - step_cpu : mean_wall - step_wall) / denom));
  if (r.have_profile) {
    line("");
    line("Per kernel, CPU s per step (gemm = every BLAS call made through kernels/gemm.hpp)");
    line(fmt::format("  {:<36} {:>8} {:>6} {:>7} {:>8}  {}", "kernel", "CPU", "share", "calls", "GFLOP/s",
                     "phases (largest first)"));
    for (const auto& k : r.kernels) {
      if (k.cpu < 0.001 * mean_cpu) continue;
      const std::string rate = k.gflop > 0 && k.cpu > 0 ? fmt::format("{:8.2f}", k.gflop / k.cpu) : "";
      line(fmt::format("  {:<36} {:8.4f} {:5.1f}% {:7.0f} {:>8}  {}", k.kernel, k.cpu, 100 * k.cpu / mean_cpu,
                       k.calls, rate, k.phases));
    }
    line("");
    line(fmt::format("  gemm:               {:.3f} s/step for {:.1f} GFLOP -> {:.2f} GFLOP/s = {:.0f}% of the sgemm "
                     "peak (CPU time)",
                     r.gemm_cpu, r.gemm_gflop, r.gemm_gflops,
                     r.sgemm_gflops_cpu > 0 ? 100 * r.gemm_gflops / r.sgemm_gflops_cpu : 0.0));
    if (r.attn_fwd_cpu > 0)
      line(fmt::format("  attention forward:  {:.3f} s/step for {:.2f} GFLOP -> {:.2f} GFLOP/s; backward: {:.3f} s/step "
                       "for {:.2f} GFLOP -> {:.2f} GFLOP/s",
                       r.attn_fwd_cpu, r.attn_fwd_gflop, r.attn_fwd_gflops, r.attn_bwd_cpu, 2 * r.attn_fwd_gflop,
                       r.attn_bwd_gflops));
  }
  return s;
}

std::string to_json_line(const BenchResult& r) {
  using nlohmann::json;
  auto timing = [](const Timing& t) {
    return json{{"wall", t.wall}, {"cpu", t.cpu}, {"wall_median", t.wall_median}, {"wall_best", t.wall_best},
                {"cpu_median", t.cpu_median}, {"cpu_best", t.cpu_best}};
  };
  json j;
  j["event"] = "bench";
  j["deck"] = r.deck;
  j["version"] = version_string();
  j["git"] = git_hash();
  j["exec_space"] = r.exec_space;
  j["blas_threads"] = r.blas_threads;
  j["blas"] = r.blas;
  j["ranks"] = 1;
  j["tokens_per_step"] = r.tokens_per_step;
  j["micro_batch"] = r.micro_batch;
  j["grad_accum"] = r.grad_accum;
  j["seq_len"] = r.seq_len;
  j["params"] = r.params;
  j["active_params"] = r.active_params;
  j["flops_per_token"] = r.flops_per_token;
  j["steps"] = r.steps;
  j["warmup"] = r.warmup;
  j["step_s"] = timing(r.step);
  j["tokens_per_s"] = r.tokens_per_s;
  j["tokens_per_s_best"] = r.tokens_per_s_best;
  j["tokens_per_s_cpu"] = r.tokens_per_s_cpu;
  j["tokens_per_s_cpu_best"] = r.tokens_per_s_cpu_best;
  j["gflops"] = r.gflops;
  j["gflops_cpu"] = r.gflops_cpu;
  j["sgemm_gflops"] = r.sgemm_gflops;
  j["sgemm_gflops_cpu"] = r.sgemm_gflops_cpu;
  j["sgemm_gflops_after"] = r.sgemm_gflops_after;
  j["sgemm_gflops_cpu_after"] = r.sgemm_gflops_cpu_after;
  j["mfu"] = r.mfu;
  j["mfu_cpu"] = r.mfu_cpu;
  j["load_before"] = r.load_before;
  j["load_after"] = r.load_after;
  j["losses"] = r.losses;
  j["imbalance"] = r.imbalance;
  json ph = json::array();
  for (const auto& p : r.phases) {
    json e{{"phase", p.name}, {"depth", p.depth}, {"cpu", p.cpu}, {"wall", p.wall}};
    if (p.leaf) e.update(json{{"gemm", p.gemm}, {"kernels", p.kernels}, {"copy", p.copy}, {"host", p.host}});
    ph.push_back(e);
  }
  j["phases"] = ph;
  if (r.have_profile) {
    json ks = json::array();
    for (const auto& k : r.kernels)
      ks.push_back({{"kernel", k.kernel}, {"cpu", k.cpu}, {"wall", k.wall}, {"calls", k.calls}, {"phases", k.phases}});
    j["kernels"] = ks;
    j["gemm"] = {{"cpu", r.gemm_cpu}, {"gflop", r.gemm_gflop}, {"gflops", r.gemm_gflops}};
    j["attention"] = {{"fwd_cpu", r.attn_fwd_cpu}, {"fwd_gflop", r.attn_fwd_gflop}, {"fwd_gflops", r.attn_fwd_gflops},
                      {"bwd_cpu", r.attn_bwd_cpu}, {"bwd_gflops", r.attn_bwd_gflops}};
  }
  if (r.torch.ran) {
    j["torch"] = json::parse(r.torch.json);
    j["torch"]["load_before"] = r.torch.load_before;
    j["torch_tokens_per_s"] = r.torch.tokens_per_s;
    j["torch_tokens_per_s_cpu"] = r.torch.tokens_per_s_cpu;
    j["ratio"] = r.ratio;
    j["ratio_wall"] = r.ratio_wall;
    j["ratio_best"] = r.ratio_best;
    j["ratio_wall_best"] = r.ratio_wall_best;
  } else {
    j["torch"] = nullptr;
    if (!r.torch.error.empty()) j["torch_error"] = r.torch.error;
  }
  return j.dump();
}

}  // namespace exa::bench
