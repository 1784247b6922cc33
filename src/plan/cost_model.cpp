#include "plan/cost_model.hpp"

#include <algorithm>
#include <cmath>
#include <fmt/format.h>
#include <vector>

#include "core/error.hpp"
#include "kernels/wire_codec.hpp"
#include "model/parameter_specs.hpp"
#include "plan/memory_model.hpp"

namespace exa::plan {

FlopsByClass flops_per_token(const model::ModelConfig& c) {
  const double d = double(c.d_model), hd = double(c.head_dim()), H = double(c.n_heads), Hkv = double(c.n_kv_heads),
               F = double(c.d_expert);
  FlopsByClass f;
  for (std::int64_t i = 0; i < c.n_layers; ++i) {
    f.attn_proj += 6 * (d * H * hd + 2 * d * Hkv * hd + H * hd * d);
    f.attn_core += 6 * H * hd * c.attention_span();
    if (c.is_moe_layer(i)) {
      f.router += 6 * double(c.n_experts) * d;
      f.experts += 6 * double(c.top_k) * 3 * F * d;
      f.shared += 6 * double(c.n_shared_experts) * 3 * F * d;
    } else {
      f.dense += 6 * 3 * double(c.d_ff) * d;
    }
  }
  f.head = 6 * double(c.vocab_size) * d;
  if (c.lora.enabled()) {
    // The frozen matrices skip their weight gradients: 4 products per
    // parameter, not 6; the adapters take all three (a routed expert's for
    // the k of E experts a token passes), as the run counts them.
    for (double* m : {&f.attn_proj, &f.router, &f.experts, &f.shared, &f.dense, &f.head}) *m *= 4.0 / 6.0;
    for (const auto& s : model::parameter_specs(c))
      if (s.trainable)
        f.adapters += 6 * double(s.numel()) *
                      (s.reduce == model::ReduceGroup::ExpertData ? double(c.top_k) / double(c.n_experts) : 1.0);
  }
  return f;
}

double wire_bytes(const std::string& format, std::int64_t quant_block) {
  // The codec's own payload size over whole blocks (scales included).
  const kernels::WireCodec codec(kernels::wire_format_from_name(format), quant_block);
  const std::int64_t n = 4 * quant_block * 1024;
  return 4.0 * double(codec.words(n)) / double(n);
}

namespace {

// A collective over a group of `size` ranks at world stride `stride`:
// inside a node when its span fits one, else over the inter-node link,
// slowed by the links the topology makes its groups share.
struct Net {
  const Cluster& cl;
  std::int64_t world;  // the candidate's ranks, filling the cluster's nodes in order
  // P2p: a ring's neighbour sends; Chain: a pipeline's, whose slowest
  // stage boundary paces it (inter-node when any boundary is).
  enum class Kind { P2p, Chain, Reduce, AllToAll };
  // `buffer`: the collective's whole buffer (a reduction's rate depends on
  // whether caches hold it; Cluster::Link::allreduce).
  double seconds(double bytes, int messages, int size, int stride, Kind kind = Kind::P2p, double buffer = 0) const {
    if (size <= 1 || bytes <= 0) return 0;
    const Link& l = link(size, stride);
    const bool inside = &l == &cl.intra;
    double bw = kind == Kind::Reduce ? l.allreduce(buffer) : kind == Kind::AllToAll ? l.alltoall() : l.bandwidth_gbs;
    const Traffic traffic =
        kind == Kind::AllToAll ? Traffic::AllToAll : kind == Kind::Chain ? Traffic::Chain : Traffic::Ring;
    if (!inside) bw /= congestion(cl.topology, world, cl.devices_per_node, l.bandwidth_gbs, bw, traffic, size, stride);
    return messages * l.latency_us * 1e-6 + bytes / (bw * 1e9);
  }
  const Link& link(int size, int stride) const {
    return std::int64_t(size) * stride <= cl.devices_per_node ? cl.intra : cl.inter;
  }
  // What `compute` seconds of work leave exposed of `comm` seconds of a
  // group's nonblocking collectives (Link::overlap).
  double exposed(double comm, double compute, int size, int stride) const {
    return size <= 1 ? comm : link(size, stride).exposed(comm, compute);
  }
  // Ring allreduce, reduce-scatter / allgather, all-to-all: per-rank sends.
  double allreduce(double n_bytes, int p, int stride) const {
    return seconds(2.0 * (p - 1) / p * n_bytes, 2 * (p - 1), p, stride, Kind::Reduce, n_bytes);
  }
  double half(double n_bytes, int p, int stride) const {
    return seconds(double(p - 1) / p * n_bytes, p - 1, p, stride, Kind::Reduce, n_bytes);
  }
  double alltoall(double n_bytes, int p, int stride) const {
    return seconds(double(p - 1) / p * n_bytes, p - 1, p, stride, Kind::AllToAll);
  }
  // The hierarchical collectives' split of a group of `p` ranks at world
  // stride `stride` (comm::make_hierarchical): q of them share a node, over
  // n nodes; n = 1 when the group fits one node.
  struct Split {
    int q = 1, n = 1;
  };
  Split split(int p, int stride) const {
    const int q = std::max(1, std::min(p, cl.devices_per_node / std::max(1, stride)));
    EXA_REQUIRE(p % q == 0 && (q == p || cl.devices_per_node % stride == 0),
                "hierarchical collectives over {} ranks at stride {} on nodes of {} devices: the nodes would hold "
                "different numbers of them; choose a layout whose groups fill whole nodes, or flat collectives",
                p, stride, cl.devices_per_node);
    return {q, p / q};
  }
  // Tutel's 2DH all-to-all (comm/hierarchical_alltoallv.hpp): every rank's
  // rows once through a node-local all-to-all, then once through an
  // all-to-all between the ranks of its local index on the other nodes, one
  // message per node pair instead of one per remote rank.
  double hierarchical_alltoall(double n_bytes, int p, int stride) const {
    const Split s = split(p, stride);
    return alltoall(n_bytes, s.q, stride) + alltoall(n_bytes, s.n, s.q * stride);
  }
};

// Per rank and micro-batch on one chunk of layers: forward matmul FLOPs,
// attention-core FLOPs, and the weight-gradient share of the backward.
struct ChunkWork {
  double matmul = 0, core = 0;
  double linear = 0;  // of matmul: the Linear seams' products (attention projections, dense FFN), which zb defers
  std::int64_t moe_layers = 0, layers = 0;
};

// Share of the large-product rate a product of M rows reaches
// (Cluster::gemm_half_rows: half of it at that many rows).
double rows_factor(double rows, double half) { return half > 0 ? rows / (rows + half) : 1.0; }

// `imbalance`: the busiest EP rank's rows over the mean. Matmul FLOPs are
// weighted by 1 / rows_factor of their product's rows (the time they
// take at the large-product rate).
ChunkWork chunk_work(const model::ModelConfig& cfg, const model::StagePlan& plan, double N, std::int64_t l0,
                     std::int64_t l1, double imbalance, double half) {
  const double d = double(cfg.d_model), hd = double(cfg.head_dim()), H = double(plan.heads),
               Hkv = double(plan.kv_heads);
  const double full = 1 / rows_factor(N, half);
  // Each local expert's rows: the rank's N k rows (imbalanced), over its experts.
  const double expert_rows = N * double(cfg.top_k) * imbalance / double(std::max<std::int64_t>(1, plan.local_experts()));
  const double per_expert = 1 / rows_factor(expert_rows, half);
  ChunkWork w;
  for (std::int64_t l = l0; l < l1; ++l) {
    ++w.layers;
    const double proj = 2 * N * (d * H * hd + 2 * d * Hkv * hd + H * hd * d) * full;
    w.matmul += proj;
    w.linear += proj;
    w.core += 2 * N * H * hd * cfg.attention_span();
    if (cfg.is_moe_layer(l)) {
      ++w.moe_layers;
      const double experts = 2 * N * double(cfg.top_k) * 3 * double(plan.d_expert) * d * imbalance * per_expert;
      w.matmul += 2 * N * double(cfg.n_experts) * d * full + experts +
                  2 * N * double(cfg.n_shared_experts) * 3 * double(plan.d_shared) * d * full;
    } else {
      const double dense = 2 * N * 3 * double(plan.d_ff) * d * full;
      w.matmul += dense;
      w.linear += dense;
    }
  }
  return w;
}

}  // namespace

StepCost predict(const model::ModelConfig& cfg, const Candidate& c, const Cluster& cl, const MemoryBytes* memory,
                 const PredictOptions& opt) {
  const Net net{cl, c.grid.world > 0 ? std::int64_t(c.grid.world) : std::int64_t(cl.devices())};
  // LoRA: the frozen matrices compute no weight gradients (the adapters'
  // products, rank r against d, are left out), and only the adapters'
  // gradients are reduced.
  const double weight_grads = cfg.lora.enabled() ? 0.0 : 1.0;
  const auto& g = c.grid;
  const int tp = g.tp, cp = g.cp, pp = g.pp, ep = g.ep, data = g.dp * g.cp;
  const int chunks = c.schedule == "interleaved" && pp > 1 ? c.virtual_stages : 1;
  const double N = double(c.micro_batch * cfg.seq_len / cp);
  const double peak = cl.peak_tflops(c.precision) * 1e12;
  const double mm_rate = peak * (c.precision == "fp32" ? cl.matmul_efficiency : cl.low_precision_efficiency),
               core_rate = peak * cl.attention_efficiency;
  // The busiest EP rank's share of the routed rows: its hottest expert at
  // `imbalance` times the mean load, the rest sharing what is left.
  double ep_load = 1;
  if (ep > 1 && opt.expert_imbalance > 1) {
    const double E = double(cfg.n_experts), per = E / ep, imb = std::min(opt.expert_imbalance, E);
    ep_load = (imb + (per - 1) * (E - imb) / (E - 1)) / per;
  }
  const double mem_bw = cl.memory_bandwidth_gbs * 1e9;
  const double a2a_b = wire_bytes(c.a2a_compression, c.quant_block);
  const bool recompute = c.recompute == "full";
  // The data-parallel collectives: the Data group's (`data` ranks at stride
  // tp; a node-local and an inter-node stage under parallel.hierarchical)
  // and the routed experts' ExpertData group's (data / ep ranks at stride
  // tp * ep; always flat, and exact under compress_scope = "inter_node"),
  // one after the other.
  const int edata = data / ep;
  const bool scope_all = c.compress_scope == "all";
  const bool grads_encoded = c.compression != "none", weights_encoded = c.weight_compression != "none";
  // Bytes per element on the wire of a gradient collective over p ranks.
  // Top-k sends 6 bytes a kept value: the reduce-scatter's all-to-all
  // carries 1.5 ratio of the fp32 bytes, the allreduce's allgather every
  // rank's payload (p / 2 times a ring allreduce's share of it).
  auto grad_wire = [&](bool encoded, int p) {
    if (!encoded) return 4.0;
    return c.compression == "topk" ? 4 * 1.5 * c.topk_ratio * (c.zero == 0 ? p / 2.0 : 1.0)
                                   : wire_bytes(c.compression, c.quant_block);
  };
  auto weight_wire = [&](bool encoded) { return encoded ? wire_bytes(c.weight_compression, c.quant_block) : 4.0; };
  // The gradient reduction of a step's (ZeRO 0/1) or a micro-batch's
  // (ZeRO 2/3) trainable elements: an allreduce under ZeRO 0, else a
  // reduce-scatter. Hierarchical: a node-local reduce-scatter, the
  // inter-node collective of this rank's 1/q (the only stage encoded),
  // and for the allreduce a node-local allgather.
  auto reduce = [&](const GroupElements& e) {
    auto op = [&](double bytes, int p, int stride) {
      return c.zero == 0 ? net.allreduce(bytes, p, stride) : net.half(bytes, p, stride);
    };
    const double t = op(e.experts * grad_wire(grads_encoded && scope_all, edata), edata, tp * ep);
    if (!c.hierarchical) return t + op(e.data * grad_wire(grads_encoded, data), data, tp);
    const auto sp = net.split(data, tp);
    return t + (c.zero == 0 ? 2 : 1) * net.half(4 * e.data, sp.q, tp) +
           op(e.data * grad_wire(grads_encoded, sp.n) / sp.q, sp.n, sp.q * tp);
  };
  // A ZeRO allgather of parameters. Hierarchical: the inter-node gather of
  // the parts into this rank's run, then the node-local gather of the runs,
  // encoded only under compress_scope = "all".
  auto gather = [&](const GroupElements& e) {
    const double t = net.half(e.experts * weight_wire(weights_encoded && scope_all), edata, tp * ep);
    if (!c.hierarchical) return t + net.half(e.data * weight_wire(weights_encoded), data, tp);
    const auto sp = net.split(data, tp);
    return t + net.half(e.data * weight_wire(weights_encoded) / sp.q, sp.n, sp.q * tp) +
           net.half(e.data * weight_wire(weights_encoded && scope_all), sp.q, tp);
  };

  StepCost r;
  std::vector<OpTimes> times(static_cast<std::size_t>(pp));
  double comp_tot = 0, tp_tot = 0, a2a_tot = 0, cp_tot = 0, zg_tot = 0, p2p_tot = 0;
  // Elements per step: the trainable ones, whose gradients are reduced and
  // which ZeRO 1/2 gather again after the step.
  GroupElements dp_elements;
  double local_params_worst = 0, offloaded = 0;
  int worst = 0;
  r.memory = memory ? *memory : peak_memory(cfg, c);
  // The stage with the most layers (the first on ties) stands for the
  // step's breakdown.
  std::vector<model::StagePlan> plans;
  for (int s = 0; s < pp; ++s) plans.push_back(stage_plan(cfg, c, s));
  std::int64_t most = -1;
  for (int s = 0; s < pp; ++s) {
    const auto n = plans[std::size_t(s)].local_layers();
    if (n > most) most = n, worst = s;
  }
  // Stages alike (layers, embedding, head) cost alike: the search meets
  // pipelines of many identical middle stages.
  std::vector<std::pair<std::string, int>> seen;
  for (int s = 0; s < pp; ++s) {
    const auto& plan = plans[std::size_t(s)];
    std::int64_t n_moe = 0;
    for (const auto& [l0, l1] : plan.layer_ranges())
      for (std::int64_t l = l0; l < l1; ++l) n_moe += cfg.is_moe_layer(l) ? 1 : 0;
    const std::string sig = fmt::format("{} {} {} {}", plan.local_layers(), n_moe, plan.has_embedding(), plan.has_head());
    if (s != worst) {
      const auto it = std::find_if(seen.begin(), seen.end(), [&](const auto& p) { return p.first == sig; });
      if (it != seen.end()) {
        times[std::size_t(s)] = times[std::size_t(it->second)];
        continue;
      }
      seen.emplace_back(sig, s);
    }
    const double Nr = plan.sequence_parallel ? N / tp : N;
    // One chunk (all chunks are alike in the interleaved split).
    const auto ranges = plan.layer_ranges();
    ChunkWork w;
    for (const auto& [l0, l1] : ranges) {
      const auto cw = chunk_work(cfg, plan, N, l0, l1, ep_load, cl.gemm_half_rows);
      w.matmul += cw.matmul / chunks;
      w.linear += cw.linear / chunks;
      w.core += cw.core / chunks;
      w.moe_layers += cw.moe_layers;
      w.layers += cw.layers;
    }
    const double moe_per_chunk = double(w.moe_layers) / chunks, layers_per_chunk = double(w.layers) / chunks;
    double head = 0;
    if (plan.has_head())
      head = 2 * N * double(plan.vocab_end - plan.vocab_begin) * double(cfg.d_model) / rows_factor(N, cl.gemm_half_rows);
    // Element-wise work: passes over the context's bytes (a third forward).
    Candidate none = c;
    none.recompute = "none";
    const double elem = context_bytes(cfg, none, plan, plan.local_layers() / chunks) * cl.elementwise_passes / mem_bw;
    const double f_compute = (w.matmul + head / chunks) / mm_rate + w.core / core_rate + elem / 3;
    const double b_input = (w.matmul + head / chunks) / mm_rate + 2 * w.core / core_rate + 2 * elem / 3;
    const double b_weight = weight_grads * (w.matmul + head / chunks) / mm_rate;
    // zb defers the Linear seams' weight gradients only; the experts' and
    // the head's stay in B (parallel/pipeline/deferred_weights.hpp).
    const double w_deferred = weight_grads * w.linear / mm_rate;
    // Collectives per micro-batch and chunk.
    const double row = N * double(cfg.d_model) * 4;
    // Tensor parallelism: an allreduce over Tp of the attention's output
    // and of a dense FFN's; an MoE layer's routed output over a block of
    // etp ranks (none with whole experts), its shared experts' over Tp.
    const int etp = c.etp();
    const double tp_row = tp > 1 ? net.allreduce(row, tp, 1) : 0;
    const double moe_row = (etp > 1 ? net.allreduce(row, etp, 1) : 0) + (cfg.n_shared_experts > 0 ? tp_row : 0);
    const double tp_f = tp > 1 ? (2 * layers_per_chunk - moe_per_chunk) * tp_row + moe_per_chunk * moe_row : 0;
    const double a2a_rows = N * double(cfg.top_k) * double(cfg.d_model) * a2a_b * ep_load;
    const double a2a_f = ep > 1 ? 2 * moe_per_chunk *
                                      (c.hierarchical_a2a ? net.hierarchical_alltoall(a2a_rows, ep, tp)
                                                          : net.alltoall(a2a_rows, ep, tp))
                                : 0;
    double cp_f = 0;
    if (cp > 1) {
      const double kv = N * 2 * double(plan.kv_heads) * double(cfg.head_dim()) * 4;
      if (c.cp_mode == "ring") {
        const double ring = layers_per_chunk * net.seconds((cp - 1) * kv, cp - 1, cp, tp);
        cp_f = net.exposed(ring, w.core / core_rate, cp, tp);  // blocks travel while others are computed
      } else {
        const double qo = N * 2 * double(plan.heads) * double(cfg.head_dim()) * 4;
        cp_f = layers_per_chunk * net.alltoall(kv + qo, cp, tp);
      }
    }
    // ZeRO 3 gathers each unit before its forward and its backward,
    // prefetching the next unit while one computes.
    const auto elements = stage_elements(cfg, plan);
    double zg_f = 0, zg_whole = 0;
    if (c.zero == 3 && data > 1) {
      GroupElements chunk = elements.parameters;
      chunk.data /= chunks;
      chunk.experts /= chunks;
      zg_whole = gather(chunk);
      zg_f = net.exposed(zg_whole, f_compute, data, tp);
    }
    const double p2p = pp > 1 ? net.seconds(Nr * double(cfg.d_model) * 4, 1, pp, tp * cp * g.dp, Net::Kind::Chain) : 0;
    auto& t = times[std::size_t(s)];
    const double fwd_comm = tp_f + a2a_f + cp_f;
    t.forward = f_compute + fwd_comm + zg_f;
    // Full recomputation runs each layer's forward once more; with every
    // N-th input kept, a segment's earlier layers are run forward once
    // more again to rebuild its inputs: (N - 1) / N of a forward on top.
    const double seg = recompute_segment(c, double(plan.local_layers()) / chunks);
    const double re_factor = recompute ? 1 + (seg - 1) / seg : 0;
    // Selective recomputation: the norms and SwiGLU products once more, a
    // pass over the bytes it does not keep.
    const double re_cheap = c.recompute == "selective"
                                ? cheap_bytes(cfg, c, plan, plan.local_layers() / chunks).per_context *
                                      cl.elementwise_passes / mem_bw / 3
                                : 0;
    const double re = re_factor * (f_compute + fwd_comm) + re_cheap;
    const double bwd_comm = 2 * fwd_comm;  // each forward collective has its transpose, twice the data for cp's dk, dv
    // A checkpoint segment's recomputed layers are gathered again, each
    // just before it runs (no prefetch): (N - 1) / N of a pass, exposed.
    const double zg_b = c.zero == 3 && data > 1 ? zg_f + (recompute ? (seg - 1) / seg * zg_whole : 0) : 0;
    if (c.schedule == "zb" && pp > 1) {
      t.backward = b_input + b_weight - w_deferred + bwd_comm + re + zg_b;
      t.weight = w_deferred;
    } else {
      t.backward = b_input + b_weight + bwd_comm + re + zg_b;
    }
    t.p2p = p2p;
    if (s == worst) {
      const double m = double(c.grad_accum) * chunks;
      comp_tot = m * (f_compute * (1 + re_factor) + b_input + b_weight);
      tp_tot = m * tp_f * (3 + re_factor);
      a2a_tot = m * a2a_f * (3 + re_factor);
      cp_tot = m * cp_f * (3 + re_factor);
      zg_tot = m * (zg_f + zg_b);
      p2p_tot = m * 2 * p2p;
      local_params_worst = state_bytes(cfg, plan, c.zero, data, data / ep).optimizer / 8;
      offloaded = offloaded_bytes(cfg, c, plan, data / ep).values;
    }
    if (elements.trainable.total() > dp_elements.total()) dp_elements = elements.trainable;
  }
  const int n_micro = c.micro_per_round();
  const int rounds = int(c.grad_accum / n_micro);
  // The timeline of the steady state, then each further micro-batch adds
  // the slowest stage's forward and backward.
  const int sim = steady_micro(n_micro, pp, chunks);
  // ZeRO 2/3 give zb's W a home in their buffers, and W then runs at fixed points.
  const Timeline tl = simulate_pipeline(c.schedule, times, sim, chunks, c.zero >= 2);
  double slowest = 0;
  for (const auto& t : times) slowest = std::max(slowest, t.forward + t.backward + t.weight);
  const double round_span = tl.span + double(n_micro - sim) * chunks * slowest;
  const double pipe = rounds * round_span;
  // Gradient reduction over the data group, once per step (ZeRO 0/1) or per
  // micro-batch (ZeRO 2/3: the engine reduce-scatters each unit's gradient
  // as its backward finishes); overlapped with the backward that produces it.
  double dp = 0;
  if (data > 1) {
    const double backward_last = times[std::size_t(worst)].backward + times[std::size_t(worst)].weight;
    if (c.zero <= 1) {
      // Gradient projection reduces each of its K tasks' gradients after
      // the task's round of micro-batches, each overlapping only that
      // round's last backward (ZeRO 2/3 reduce per micro-batch either way).
      const int reductions = std::max(1, c.projection_tasks);
      dp = reductions * net.exposed(reduce(dp_elements), backward_last, data, tp) +
           (c.zero == 1 ? gather(dp_elements) : 0);
    } else {
      // zb's deferred products reduce-scatter their units once more from
      // buffers of their own (parallel/data/zero_engine.hpp), the Data
      // group's whole units again: the experts' products are not deferred.
      GroupElements again = dp_elements;
      again.experts = 0;
      const double deferred = c.schedule == "zb" && pp > 1 ? reduce(again) : 0;
      dp = double(c.grad_accum) * net.exposed(reduce(dp_elements) + deferred, backward_last, data, tp) +
           (c.zero == 2 ? gather(dp_elements) : 0);
    }
  }
  r.optimizer = local_params_worst * 32 / mem_bw;  // AdamW reads p, g, m, v, writes p, m, v; the norm reads g
  if (c.projection_tasks > 1) {
    // PCGrad (train/grad_projection.cpp, optim/gradient_projection.cpp),
    // passes over this rank's part: each task's copy and norm (3 each),
    // each pair's dot as two squared norms of a sum (4 each, twice), the
    // sum's zeroing, one weighted add per task (3) and the copy back (2).
    // A task that conflicts adds a copy and a projection (5), and, beyond
    // two tasks, fresh dots; the model counts none.
    const double K = double(c.projection_tasks);
    r.optimizer += local_params_worst * 4 * (3 * K + 8 * K * (K - 1) / 2 + 1 + 3 * K + 2) / mem_bw;
  }
  if (offloaded > 0) {
    // Expert offload (docs/performance.md, "Expert offload"): every 4 KiB
    // page the step brings in costs a fault and its drop, measured at
    // 0.65 us on tmpfs here (ZeRO 0: values in forward, values and
    // gradients in backward, the norm and the optimizer's values and
    // gradients; ZeRO 1-3: the last two), and every changed page of the
    // values and moments is written back to the node's disk at its
    // calibrated write rate (storage_write_gbs), which the node's ranks in
    // the run share. (The gradients are zeroed by punching holes, their
    // dirty pages dropped unwritten.)
    const double m = c.offload_optimizer ? 2.0 * offloaded : 0.0;
    const double paged = (c.zero == 0 ? 5.0 : 2.0) * offloaded + m;
    const double written = offloaded + m;
    r.offload = paged / 4096.0 * 0.65e-6 +
                written * double(std::min(cl.devices_per_node, g.world)) / (cl.storage_write_gbs * 1e9);
  }
  r.compute = comp_tot;
  r.tp = tp_tot;
  r.a2a = a2a_tot;
  r.cp = cp_tot;
  r.zero_gather = zg_tot;
  r.pp_p2p = p2p_tot;
  r.dp = dp;
  r.bubble = pp > 1 ? rounds * tl.span * tl.bubble : 0;  // the idle time does not grow with more micro-batches
  r.step = pipe + dp + r.optimizer + r.offload;
  const double tokens = double(g.dp) * double(c.micro_batch) * double(c.grad_accum) * double(cfg.seq_len);
  r.tokens_per_s = tokens / r.step;
  const double flops = flops_per_token(cfg).total() * tokens;
  r.mfu = flops / r.step / (double(g.world) * peak);
  r.memory_capacity = cl.memory_gib * 1073741824.0;
  r.fits = r.memory.total() <= cl.usable_memory_bytes();
  const std::array<std::pair<const char*, double>, 10> parts = {{{"compute", r.compute},
                                                                 {"tp", r.tp},
                                                                 {"a2a", r.a2a},
                                                                 {"cp", r.cp},
                                                                 {"zero", r.zero_gather},
                                                                 {"pp_p2p", r.pp_p2p},
                                                                 {"dp", r.dp},
                                                                 {"bubble", r.bubble},
                                                                 {"optimizer", r.optimizer},
                                                                 {"offload", r.offload}}};
  const auto top = *std::max_element(parts.begin(), parts.end(),
                                     [](const auto& a, const auto& b) { return a.second < b.second; });
  r.bound = r.fits ? top.first : "memory";
  r.reason = !r.fits ? fmt::format("does not fit: {:.1f} of {:.1f} GiB", r.memory.total() / 1073741824.0,
                                   cl.memory_gib)
                     : fmt::format("{}-bound: {} {:.0f}% of the step, memory {:.1f}/{:.1f} GiB", r.bound, top.first,
                                   100 * top.second / r.step, r.memory.total() / 1073741824.0, cl.memory_gib);
  return r;
}

}  // namespace exa::plan
