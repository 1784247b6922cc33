#include "bench/bench_torch.hpp"
#include "bench/temp_dir.hpp"

#include <fmt/format.h>
#include <stdlib.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <nlohmann/json.hpp>
#include <string>

#include "bench/bench_machine.hpp"
#include "core/error.hpp"
#include "core/log.hpp"

namespace exa::bench {

namespace fs = std::filesystem;

namespace {

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

void read_timing(const nlohmann::json& j, const char* wall, const char* cpu, Timing& t) {
  t.wall = j.at(wall).get<std::vector<double>>();
  t.cpu = j.at(cpu).get<std::vector<double>>();
  summarise(t);
}

}  // namespace

void write_torch_inputs(const deck::Config& cfg, const std::vector<std::int32_t>& tokens, const std::string& dir) {
  {
    std::ofstream f(fs::path(dir) / "cfg.json");
    f << cfg.to_json(1) << "\n";
    EXA_REQUIRE(f.good(), "examoe-bench: could not write {}/cfg.json", dir);
  }
  std::ofstream f(fs::path(dir) / "tokens.bin", std::ios::binary);
  f.write(reinterpret_cast<const char*>(tokens.data()),
          static_cast<std::streamsize>(tokens.size() * sizeof(std::int32_t)));
  EXA_REQUIRE(f.good(), "examoe-bench: could not write {}/tokens.bin", dir);
}

void run_torch(const deck::Config& cfg, const BenchOptions& opt, const std::vector<std::int32_t>& tokens_log,
               BenchResult& r) {
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
    dir = make_temp_dir("examoe-bench");
    if (dir.empty()) {
      t.error = "could not create a temporary directory";
      return;
    }
  } else {
    fs::create_directories(dir);
  }
  const fs::path cfg_json = dir / "cfg.json", tokens = dir / "tokens.bin";
  try {
    write_torch_inputs(cfg, tokens_log, dir.string());
  } catch (const Error& e) {
    t.error = e.what();
    return;
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

}  // namespace exa::bench
