#include "train/step_log.hpp"

#include <fmt/format.h>

namespace exa::train {

namespace {
std::string si(double x) {
  if (x >= 1e9) return fmt::format("{:.2f}G", x / 1e9);
  if (x >= 1e6) return fmt::format("{:.2f}M", x / 1e6);
  if (x >= 1e3) return fmt::format("{:.1f}k", x / 1e3);
  return fmt::format("{:.0f}", x);
}
std::string mib(double b) { return fmt::format("{:.1f}MiB", b / (1024.0 * 1024.0)); }
}  // namespace

std::string format_line(const StepLog& s) {
  const std::string val = s.val_loss ? fmt::format("{:.4f}{}", *s.val_loss,
                                                   s.val_bpb ? fmt::format(" ({:.4f} bpb)", *s.val_bpb) : "")
                                     : std::string("-");
  const std::string moe = s.moe_summary.empty() ? std::string() : " | " + s.moe_summary;
  return fmt::format(
      "step {:>6}/{} | loss {:.4f} | val {} | lr {:.3e} | gnorm {:.3f}{} | {} tok/s | {:.3f} TFLOP/s | MFU {:.1f}% | "
      "imb {:.2f}{}{}{} | compute {:.3f}s comm {:.3f}s io {:.3f}s | mem {}{} + act {} (rss {}){}",
      s.step, s.steps, s.loss, val, s.lr, s.grad_norm, s.skipped ? " SKIPPED" : "", si(s.tokens_per_s), s.tflops,
      100.0 * s.mfu, s.imbalance, moe,
      s.nonfinite_steps > 0 ? fmt::format(" | non-finite steps {}", s.nonfinite_steps) : std::string(),
      s.loss_scale ? fmt::format(" | scale {:g} overflows {}", *s.loss_scale, s.overflow_skips) : std::string(),
      s.t_compute, s.t_comm, s.t_io, mib(s.mem_params + s.mem_grads + s.mem_optim),
      s.mem_buffers > 0 ? " + buf " + mib(s.mem_buffers) : std::string(), mib(s.mem_activations), mib(s.mem_peak_rss),
      s.joules_per_token ? fmt::format(" | {:.3g} J/tok {:.3g} kWh", *s.joules_per_token, *s.kwh) : std::string());
}

nlohmann::json to_json(const StepLog& s) {
  nlohmann::json j;
  j["step"] = s.step;
  j["tokens"] = s.tokens_seen;
  j["loss"] = s.loss;
  j["ce"] = s.ce;
  j["aux"] = s.aux;
  j["z"] = s.z;
  j["val_loss"] = s.val_loss ? nlohmann::json(*s.val_loss) : nlohmann::json(nullptr);
  if (s.val_loss && s.val_bpb) j["val_bpb"] = *s.val_bpb;
  j["lr"] = s.lr;
  j["grad_norm"] = s.grad_norm;
  j["tokens_per_s"] = s.tokens_per_s;
  j["tflops"] = s.tflops;
  j["mfu"] = s.mfu;
  j["expert_imbalance"] = s.imbalance;
  j["time"] = {{"compute", s.t_compute}, {"comm_exposed", s.t_comm}, {"all_to_all", s.t_a2a},
               {"all_to_all_overlapped", s.t_a2a_overlapped}, {"tp", s.t_tp}, {"io", s.t_io}, {"eval", s.t_eval},
               {"compress", s.t_compress}};
  j["context_comm_exposed"] = s.t_context;  // part of time.comm_exposed
  j["memory"] = {{"params", s.mem_params}, {"grads", s.mem_grads}, {"optim", s.mem_optim},
                 {"buffers", s.mem_buffers}, {"experts", s.mem_experts}, {"activations", s.mem_activations},
                 {"peak_rss", s.mem_peak_rss}};
  j["skipped"] = s.skipped;
  j["nonfinite_steps"] = s.nonfinite_steps;
  if (s.loss_scale) j["loss_scale"] = {{"scale", *s.loss_scale}, {"overflow_skips", s.overflow_skips}};
  if (s.joules_per_token) j["energy"] = {{"joules_per_token", *s.joules_per_token}, {"kwh", *s.kwh}};
  if (!s.moe.is_null()) j["moe"] = s.moe;
  return j;
}

}  // namespace exa::train
