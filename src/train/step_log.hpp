#pragma once
// What one logging interval reports, and its two renderings: the line rank 0
// prints and the JSON object appended to metrics.jsonl.
#include <cstdint>
#include <nlohmann/json.hpp>
#include <optional>
#include <string>

namespace exa::train {

struct StepLog {
  std::int64_t step = 0, steps = 0;   // 1-based step just finished, of `steps`
  std::int64_t tokens_seen = 0;
  double loss = 0, ce = 0, aux = 0, z = 0;  // means over the interval's steps
  std::optional<double> val_loss;     // when an evaluation ran at this step
  // The validation loss in bits per byte of text (val_loss / ln 2 x tokens
  // per byte): comparable between byte-level and subword runs. Set when the
  // bytes are known (a text corpus, or a shard with data.tokenizer).
  std::optional<double> val_bpb;
  double lr = 0, grad_norm = 0;
  double tokens_per_s = 0, tflops = 0, mfu = 0;  // achieved rates over the interval
  double imbalance = 1;               // expert load max/mean (worst MoE layer)
  double t_compute = 0, t_comm = 0, t_io = 0, t_eval = 0;  // seconds per step, averaged over the interval
  double t_a2a = 0;  // of t_comm: the expert all-to-all's waits (counts and rows; the blocking exchange all exposed)
  // Of t_compute: the shared experts run while the expert all-to-all's
  // first part travels (moe.a2a_chunks > 1), the compute that hid it.
  double t_a2a_overlapped = 0;
  double t_tp = 0;   // of t_comm: the tensor-parallel collectives (comm/tp_*) left exposed
  double t_context = 0;
  double t_compress = 0;  // gradient compression: encoding and decoding (inside t_comm)  // of t_comm: context parallelism's exposed ring / all-to-all attention waits
  double mem_params = 0, mem_grads = 0, mem_optim = 0;     // bytes on this rank (own accounting)
  double mem_buffers = 0;             // ZeRO-2/3 unit buffers (gathered parameters, unit gradients)
  double mem_experts = 0;             // the routed experts' share of params + grads + optim
  double mem_activations = 0;         // bytes kept by the forward for the backward
  double mem_peak_rss = 0;            // bytes, from the OS
  bool skipped = false;               // non-finite gradient: update not applied
  std::int64_t nonfinite_steps = 0;   // steps dropped so far by resilience.nan_policy (train/nan_policy.hpp)
  std::optional<double> loss_scale;   // dynamic loss scaling (optim/loss_scaler.hpp): S after the step
  std::int64_t overflow_skips = 0;    // steps it skipped so far
  std::optional<double> joules_per_token, kwh;  // energy estimate (train/energy.hpp): interval, run so far
  std::string moe_summary;            // parallel/expert/moe_load.hpp: the worst layer's loads (empty: no MoE layers)
  nlohmann::json moe;                 // parallel/expert/moe_load.hpp: every layer's loads (null: no MoE layers)
};

std::string format_line(const StepLog& s);
nlohmann::json to_json(const StepLog& s);

}  // namespace exa::train
