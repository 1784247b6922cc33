// Cross-key consistency. Each check names the keys involved, the numbers
// that clash and the values that would work, and is located (Config::locate)
// at the involved key the user set last. The order is the order of the
// checks below: layout against world size first, then model shape, MoE,
// parallel splits, optimizer, evaluation.
#include "core/deck/deck_checks.hpp"

#include <fmt/format.h>
#include <fmt/ranges.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <utility>

#include "core/deck/did_you_mean.hpp"
#include "core/error.hpp"
#include "core/offload_tier.hpp"
#include "core/length_buckets.hpp"

namespace exa::deck {
namespace {

// "1, 2, 4, 8": values v in [1, n] with n % v == 0 and keep(v); at most 12
// of them, since a list longer than that no longer reads as a suggestion.
template <class Keep>
std::string divisors(std::int64_t n, Keep keep) {
  std::string out;
  int shown = 0;
  for (std::int64_t v = 1; v <= n; ++v) {
    if (n % v != 0 || !keep(v)) continue;
    if (shown == 12) return out + ", ...";
    out += (out.empty() ? "" : ", ") + std::to_string(v);
    ++shown;
  }
  return out;
}
std::string divisors(std::int64_t n) {
  return divisors(n, [](std::int64_t) { return true; });
}

[[noreturn]] void fail(const Config& c, std::initializer_list<std::string_view> keys, const std::string& what) {
  throw Error(c.locate(keys) + " " + what);
}

// `keys` act only under `setting` (of the key `switch_key`, which is off:
// `got` says how, or is empty): one set away from its default is refused.
// At its default a key changes nothing (input/full.toml sets every key).
void refuse_set_without(const Config& c, std::initializer_list<const char*> keys, const char* switch_key,
                        const std::string& setting, const std::string& got) {
  for (const char* key : keys)
    if (const auto& st = c.setting(key); st.origin != Origin::Default && !(st.value == st.spec->def))
      fail(c, {key, switch_key},
           fmt::format("{} is set, but it applies to {} only{}; set {}, or remove {}", key, setting, got, setting,
                       key));
}

void check_model(const Config& c) {
  const auto d = c.get_int("model.d_model"), h = c.get_int("model.n_heads"), kv = c.get_int("model.n_kv_heads");
  if (d % h != 0) {
    const auto ok = divisors(d, [&](std::int64_t v) { return (d / v) % 2 == 0; });
    fail(c, {"model.n_heads", "model.d_model"},
         fmt::format("model.d_model = {} is not divisible by model.n_heads = {}; {}", d, h,
                     ok.empty() ? "make d_model even and a multiple of n_heads"
                                : "choose n_heads from " + ok + " (even head dim d_model/n_heads)"));
  }
  if ((d / h) % 2 != 0) {
    const auto ok = divisors(d, [&](std::int64_t v) { return (d / v) % 2 == 0; });
    fail(c, {"model.n_heads", "model.d_model"},
         fmt::format("head dim model.d_model/model.n_heads = {}/{} = {} is odd, but RoPE rotates pairs of "
                     "elements; {}",
                     d, h, d / h, ok.empty() ? "make d_model even" : "choose n_heads from " + ok));
  }
  if (h % kv != 0) {
    fail(c, {"model.n_kv_heads", "model.n_heads"},
         fmt::format("model.n_heads = {} is not divisible by model.n_kv_heads = {}; each K/V head serves "
                     "n_heads/n_kv_heads query heads: choose n_kv_heads from {}",
                     h, kv, divisors(h)));
  }
}

void check_attention(const Config& c) {
  if (c.get_string("attention.kind") != "lsh") return;
  // The bucket sort needs every key of a sequence on one rank: the
  // all-to-all mode gathers whole sequences of a share of the heads; the
  // ring passes key blocks by and never holds them all.
  if (const auto cp = c.get_int("parallel.cp"); cp > 1 && c.get_string("parallel.cp_mode") == "ring")
    fail(c, {"attention.kind", "parallel.cp_mode"},
         fmt::format("attention.kind = \"lsh\" sorts every key of a sequence into buckets, but parallel.cp_mode = "
                     "\"ring\" never holds a whole sequence's keys on one rank (parallel.cp = {}); set "
                     "parallel.cp_mode = \"a2a\", which gathers whole sequences of a share of the heads, or "
                     "attention.kind = \"full\"",
                     cp));
}

void check_moe(const Config& c) {
  if (c.get_string("moe.router_bias") == "aux_free" && c.get_float("moe.bias_rate") <= 0.0) {
    fail(c, {"moe.bias_rate", "moe.router_bias"},
         "moe.router_bias = \"aux_free\" moves each expert's routing bias by moe.bias_rate after every step, but "
         "bias_rate = 0.0 would never move it: set bias_rate > 0 (e.g. 1e-3) or router_bias = \"none\"");
  }
  {
    std::vector<double> n;
    try {
      n = number_list(c.get_string("moe.bias_init"));
    } catch (const Error& e) {
      fail(c, {"moe.bias_init"}, std::string("moe.bias_init: ") + e.what());
    }
    const bool any = std::any_of(n.begin(), n.end(), [](double b) { return b != 0.0; });
    if (any && c.get_string("moe.router_bias") != "aux_free") {
      fail(c, {"moe.bias_init", "moe.router_bias"},
           "moe.bias_init sets starting aux_free routing biases, but moe.router_bias = \"none\" routes without "
           "biases: set router_bias = \"aux_free\" (and bias_rate > 0) or remove bias_init");
    }
    if (std::int64_t(n.size()) > c.get_int("moe.n_experts")) {
      fail(c, {"moe.bias_init", "moe.n_experts"},
           fmt::format("moe.bias_init gives {} biases but the model has moe.n_experts = {}; give at most {}",
                       n.size(), c.get_int("moe.n_experts"), c.get_int("moe.n_experts")));
    }
  }
  if (c.get_int("moe.replace_every") > 0 && c.get_int("parallel.ep") <= 1) {
    fail(c, {"moe.replace_every", "parallel.ep"},
         fmt::format("moe.replace_every = {} re-places experts over the expert-parallel ranks, but parallel.ep = {} "
                     "keeps every expert on every rank: set parallel.ep > 1 or replace_every = 0",
                     c.get_int("moe.replace_every"), c.get_int("parallel.ep")));
  }
  const auto every = c.get_int("moe.moe_every");
  if (every == 0) return;  // dense model: the [moe] sizes are unused
  const auto e = c.get_int("moe.n_experts"), k = c.get_int("moe.top_k"), layers = c.get_int("model.n_layers");
  if (k > e) {
    fail(c, {"moe.top_k", "moe.n_experts"},
         fmt::format("moe.top_k = {} exceeds moe.n_experts = {}; a token cannot be routed to more experts than "
                     "exist: set top_k <= {}",
                     k, e, e));
  }
  if (every > layers) {
    fail(c, {"moe.moe_every", "model.n_layers"},
         fmt::format("moe.moe_every = {} exceeds model.n_layers = {}, so no layer would be MoE; set moe_every "
                     "between 1 and {}, or 0 for a dense model",
                     every, layers, layers));
  }
}

void check_parallel(const Config& c) {
  if (!c.get_bool("parallel.auto") && sets_layout_key(c.setting("parallel.cluster"), true))
    fail(c, {"parallel.cluster"},
         "parallel.cluster names the cluster parallel.auto plans for, and parallel.auto is false; set "
         "parallel.auto = true or remove parallel.cluster");
  if (c.get_bool("parallel.auto")) {
    // The deck's own lines only: examoe passes the planner's choice as
    // overrides, and checks the command line's own --set itself.
    for (const auto& key : auto_layout_keys())
      if (sets_layout_key(c.setting(key), false))
        fail(c, {key}, fmt::format("parallel.auto = true chooses {0} itself; remove {0} from the deck (or set "
                                   "parallel.auto = false to keep your layout)",
                                   key));
  }
  const auto tp = c.get_int("parallel.tp"), pp = c.get_int("parallel.pp"), cp = c.get_int("parallel.cp");
  const auto dp = c.get_int("parallel.dp"), ep = c.get_int("parallel.ep");
  const auto layers = c.get_int("model.n_layers");
  if (pp > layers) {
    fail(c, {"parallel.pp", "model.n_layers"},
         fmt::format("parallel.pp = {} exceeds model.n_layers = {}; every pipeline stage needs at least one "
                     "layer: set pp <= {}",
                     pp, layers, layers));
  }
  const char* splits[][2] = {{"model.n_heads", "attention heads"},
                             {"model.n_kv_heads", "key/value heads"},
                             {"model.d_ff", "dense FFN hidden width"}};
  for (const auto& [key, what] : splits) {
    if (key == std::string_view("model.d_ff") && c.get_int("moe.moe_every") == 1) continue;  // no dense layer
    const auto n = c.get_int(key);
    if (n % tp != 0) {
      fail(c, {"parallel.tp", key},
           fmt::format("{} = {} is not divisible by parallel.tp = {}; tensor parallelism splits the {} evenly "
                       "over tp ranks: choose tp from {}",
                       key, n, tp, what, divisors(n)));
    }
  }
  // Tensor parallelism also splits the vocabulary (embedding and LM head)
  // and, etp ways, every routed expert's FFN.
  if (const auto v = c.get_int("model.vocab_size"); v % tp != 0) {
    fail(c, {"parallel.tp", "model.vocab_size"},
         fmt::format("model.vocab_size = {} is not divisible by parallel.tp = {}; the embedding and LM head are "
                     "split on the vocabulary over tp ranks: choose tp from {}",
                     v, tp, divisors(v)));
  }
  if (const auto seq = c.get_int("model.seq_len"); c.get_bool("parallel.sequence_parallel") && seq % tp != 0) {
    fail(c, {"parallel.sequence_parallel", "model.seq_len", "parallel.tp"},
         fmt::format("model.seq_len = {} is not divisible by parallel.tp = {}; sequence parallelism splits each "
                     "micro-batch's tokens over the tp ranks: choose tp from {}",
                     seq, tp, divisors(seq)));
  }
  // etp splits each routed expert over blocks of etp consecutive tp ranks.
  if (const auto etp = c.get_int("parallel.etp"); etp != 0 && tp % etp != 0) {
    fail(c, {"parallel.etp", "parallel.tp"},
         fmt::format("parallel.etp = {} does not divide parallel.tp = {}: the routed experts are split over "
                     "blocks of etp of the tp ranks; set etp = 0 (= tp) or one of {}",
                     etp, tp, divisors(tp)));
  }
  if (const auto etp = c.get_int("parallel.etp") == 0 ? tp : c.get_int("parallel.etp"),
      f = c.get_int("moe.d_expert");
      c.get_int("moe.moe_every") != 0 && tp % etp == 0) {
    if (c.get_int("moe.n_shared_experts") > 0 && f % tp != 0)
      fail(c, {"parallel.tp", "moe.d_expert", "moe.n_shared_experts"},
           fmt::format("moe.d_expert = {} is not divisible by parallel.tp = {}; tensor parallelism splits the "
                       "shared experts' FFN width evenly: choose tp from {}",
                       f, tp, divisors(f)));
    else if (f % etp != 0)
      fail(c, {"parallel.etp", "moe.d_expert"},
           fmt::format("moe.d_expert = {} is not divisible by the expert tensor parallelism etp = {}; it splits "
                       "the routed experts' FFN width evenly: choose etp from {} (dividing it and parallel.tp = {})",
                       f, etp, divisors(f, [tp](std::int64_t e) { return tp % e == 0; }), tp));
  }
  const auto seq = c.get_int("model.seq_len");
  if (seq % cp != 0) {
    fail(c, {"parallel.cp", "model.seq_len"},
         fmt::format("model.seq_len = {} is not divisible by parallel.cp = {}; context parallelism splits each "
                     "sequence into cp equal chunks: choose cp from {}",
                     seq, cp, divisors(seq)));
  }
  if (cp > 1 && seq % (2 * cp) != 0) {
    fail(c, {"parallel.cp", "model.seq_len"},
         fmt::format("model.seq_len = {} is not divisible by 2*parallel.cp = {}; context parallelism cuts each "
                     "sequence into 2*cp chunks (rank r holds chunks r and 2cp-1-r, for causal load balance): "
                     "choose cp from {}",
                     seq, 2 * cp, divisors(seq, [&](std::int64_t v) { return seq % (2 * v) == 0; })));
  }
  const bool a2a = cp > 1 && c.get_string("parallel.cp_mode") == "a2a";
  if (const auto kv = c.get_int("model.n_kv_heads"); a2a && tp == 1 && kv % cp != 0) {
    fail(c, {"parallel.cp_mode", "parallel.cp", "model.n_kv_heads"},
         fmt::format("parallel.cp_mode = \"a2a\" gives each of the cp = {} ranks n_kv_heads/cp key/value heads, but "
                     "n_kv_heads = {} is not divisible by {}: choose cp from {} or parallel.cp_mode = \"ring\"",
                     cp, kv, cp, divisors(kv)));
  }
  // Tensor x context parallelism: each TP rank's all-to-all splits its own
  // n_kv_heads/tp heads over cp, and sequence parallelism splits each CP
  // rank's seq_len/cp rows over tp.
  if (const auto kv = c.get_int("model.n_kv_heads"); a2a && tp > 1 && (kv / tp) % cp != 0) {
    fail(c, {"parallel.cp_mode", "parallel.cp", "parallel.tp", "model.n_kv_heads"},
         fmt::format("parallel.cp_mode = \"a2a\" with parallel.tp = {} splits each tensor-parallel rank's "
                     "n_kv_heads/tp = {}/{} = {} key/value heads over the cp = {} ranks, but {} is not divisible by "
                     "{}: choose cp from {} or parallel.cp_mode = \"ring\"",
                     tp, kv, tp, kv / tp, cp, kv / tp, cp, divisors(kv / tp)));
  }
  if (c.get_bool("parallel.sequence_parallel") && cp > 1 && (seq / cp) % tp != 0) {
    fail(c, {"parallel.sequence_parallel", "model.seq_len", "parallel.cp", "parallel.tp"},
         fmt::format("model.seq_len/cp = {}/{} = {} is not divisible by parallel.tp = {}; sequence parallelism "
                     "splits each context-parallel rank's rows of a sequence over the tp ranks: choose tp from {}",
                     seq, cp, seq / cp, tp, divisors(seq / cp)));
  }
  if ((dp * cp) % ep != 0) {
    fail(c, {"parallel.ep", "parallel.dp", "parallel.cp"},
         fmt::format("parallel.ep = {} does not divide dp*cp = {}*{} = {}; expert parallelism is carved out of "
                     "the data- and context-parallel ranks: choose ep from {}",
                     ep, dp, cp, dp * cp, divisors(dp * cp)));
  }
  if (c.get_int("moe.moe_every") == 0) {
    if (ep > 1) {
      fail(c, {"parallel.ep", "moe.moe_every"},
           fmt::format("parallel.ep = {} but the model has no MoE layers (moe.moe_every = 0); set ep = 1", ep));
    }
  } else if (const auto e = c.get_int("moe.n_experts"); e % ep != 0) {
    fail(c, {"parallel.ep", "moe.n_experts"},
         fmt::format("moe.n_experts = {} is not divisible by parallel.ep = {}; each expert-parallel rank holds "
                     "n_experts/ep experts: choose ep from {}",
                     e, ep, divisors(e, [&](std::int64_t v) { return (dp * cp) % v == 0; })));
  }
  const auto mb = c.get_int("parallel.microbatches"), accum = c.get_int("train.grad_accum");
  if (accum % mb != 0) {
    fail(c, {"parallel.microbatches", "train.grad_accum"},
         fmt::format("parallel.microbatches = {} does not divide train.grad_accum = {}; the pipeline runs a "
                     "step's grad_accum micro-batches in rounds of microbatches: choose microbatches from {}",
                     mb, accum, divisors(accum)));
  }
}

// Expert growth ([growth]): a schedule the model and the layout can follow.
void check_growth(const Config& c) {
  const auto every = c.get_int("growth.every");
  const auto distill = c.get_int("growth.distill_steps");
  if (every == 0 && distill > 0)
    fail(c, {"growth.distill_steps", "growth.every"},
         fmt::format("growth.distill_steps = {} distils from the model before each growth event, but growth is off "
                     "(growth.every = 0): set growth.every > 0 or growth.distill_steps = 0",
                     distill));
  if (every == 0) return;
  if (distill > every)
    fail(c, {"growth.distill_steps", "growth.every"},
         fmt::format("growth.distill_steps = {} is longer than growth.every = {}: a distillation window would run "
                     "into the next event, which has its own teacher; set distill_steps <= {}",
                     distill, every, every));
  const auto e = c.get_int("moe.n_experts"), add = c.get_int("growth.add"), max = c.get_int("growth.max_experts");
  const auto ep = c.get_int("parallel.ep");
  if (c.get_int("moe.moe_every") == 0) {
    fail(c, {"growth.every", "moe.moe_every"},
         "growth.every grows the experts of the MoE layers, but the model has none (moe.moe_every = 0): set "
         "moe.moe_every >= 1 or growth.every = 0");
  }
  if (max <= e) {
    fail(c, {"growth.max_experts", "growth.every", "moe.n_experts"},
         fmt::format("growth.every = {} grows the experts up to growth.max_experts, but max_experts = {} does not "
                     "exceed moe.n_experts = {}: set max_experts > {} (e.g. {})",
                     every, max, e, e, e + 4 * add));
  }
  if (add > e) {
    fail(c, {"growth.add", "moe.n_experts"},
         fmt::format("growth.add = {} exceeds moe.n_experts = {}; each growth event clones a different expert: "
                     "set add <= {}",
                     add, e, e));
  }
  for (std::int64_t n = e; n < max;) {
    n = std::min(max, n + add);
    if (n % ep == 0) continue;
    fail(c, {"growth.add", "growth.max_experts", "parallel.ep"},
         fmt::format("growth would take the MoE layers to {} experts, which parallel.ep = {} does not divide (each "
                     "expert-parallel rank holds experts/ep of them): with ep = {}, choose growth.add a multiple of "
                     "{} and growth.max_experts = moe.n_experts + a multiple of add (e.g. add = {}, max_experts = {})",
                     n, ep, ep, ep, ((add + ep - 1) / ep) * ep, e + 4 * ((add + ep - 1) / ep) * ep));
  }
}

// Pipeline schedule and split: the interleaved schedule's chunks and
// micro-batch groups, and pipeline.layers_per_stage's counts (also found by
// --check, before any rank builds a stage).
// [lora]: targets the model has, and a rank each adapted matrix can take.
void check_lora(const Config& c) {
  const auto r = c.get_int("lora.rank");
  if (r == 0) return;
  std::vector<std::string> targets;
  try {
    targets = name_list(c.get_string("lora.targets"));
  } catch (const Error& e) {
    fail(c, {"lora.targets"}, std::string("lora.targets: ") + e.what());
  }
  const auto L = c.get_int("model.n_layers"), every = c.get_int("moe.moe_every");
  bool dense = false, moe = false;
  for (std::int64_t i = 0; i < L; ++i) (every > 0 && (i + 1) % every == 0 ? moe : dense) = true;
  const auto d = c.get_int("model.d_model"), h = c.get_int("model.n_heads"), kv = c.get_int("model.n_kv_heads");
  const std::vector<std::string> known = {"attention", "dense_ffn", "shared_experts", "experts", "router",
                                          "embeddings"};
  for (const auto& t : targets) {
    std::int64_t smallest = 0;
    if (t == "attention") {
      smallest = std::min(d, (d / h) * kv);
    } else if (t == "dense_ffn") {
      if (!dense)
        fail(c, {"lora.targets", "moe.moe_every"},
             fmt::format("lora.targets names dense_ffn, but every layer is MoE (moe.moe_every = {}); drop "
                         "dense_ffn, or make some layers dense", every));
      smallest = std::min(d, c.get_int("model.d_ff"));
    } else if (t == "shared_experts") {
      if (!moe || c.get_int("moe.n_shared_experts") == 0)
        fail(c, {"lora.targets", "moe.n_shared_experts"},
             "lora.targets names shared_experts, but the model has none (moe.n_shared_experts = 0 or no MoE "
             "layer); drop shared_experts");
      smallest = std::min(d, c.get_int("moe.d_expert"));
    } else if (t == "experts") {
      if (!moe)
        fail(c, {"lora.targets", "moe.moe_every"},
             "lora.targets names experts, but the model has no MoE layer; drop experts");
      smallest = std::min(d, c.get_int("moe.d_expert"));
    } else if (t == "router") {
      if (!moe)
        fail(c, {"lora.targets", "moe.moe_every"},
             "lora.targets names router, but the model has no MoE layer; drop router");
      smallest = std::min(d, c.get_int("moe.n_experts"));
    } else if (t == "embeddings") {
      smallest = std::min(d, c.get_int("model.vocab_size"));
    } else {
      const auto guess = did_you_mean(t, known);
      fail(c, {"lora.targets"},
           fmt::format("lora.targets: \"{}\" is not a projection of the model; {}", t,
                       guess.empty() ? "use attention, dense_ffn, shared_experts, experts, router or embeddings"
                                     : fmt::format("did you mean \"{}\"?", guess)));
    }
    if (r > smallest)
      fail(c, {"lora.rank", "lora.targets"},
           fmt::format("lora.rank = {} exceeds the smallest side ({}) of the {} matrices it adapts; a rank above "
                       "min(d_in, d_out) adds nothing: use lora.rank <= {}", r, smallest, t, smallest));
  }
  if (c.get_int("growth.every") > 0)
    fail(c, {"growth.every", "lora.rank"},
         "expert growth (growth.every > 0) with adapters (lora.rank > 0) is not built: growth adds experts "
         "that would train while the rest is frozen; set growth.every = 0 or lora.rank = 0");
}

void check_pipeline(const Config& c) {
  const auto pp = c.get_int("parallel.pp"), v = c.get_int("pipeline.virtual_stages");
  const auto layers = c.get_int("model.n_layers"), accum = c.get_int("train.grad_accum");
  const bool interleaved = c.get_string("pipeline.schedule") == "interleaved";
  if (interleaved != (v > 1)) {
    fail(c, {"pipeline.virtual_stages", "pipeline.schedule"},
         interleaved ? fmt::format("pipeline.schedule = \"interleaved\" needs pipeline.virtual_stages >= 2 model "
                                   "chunks per stage (got {}); set virtual_stages = 2, or schedule = \"1f1b\"",
                                   v)
                     : fmt::format("pipeline.virtual_stages = {} with pipeline.schedule = \"{}\": only the "
                                   "interleaved schedule runs several model chunks per stage; set schedule = "
                                   "\"interleaved\" or virtual_stages = 1",
                                   v, c.get_string("pipeline.schedule")));
  }
  const auto per_stage = c.get_string("pipeline.layers_per_stage");
  const bool explicit_split = per_stage != "auto" && per_stage.find_first_not_of(" \t") != std::string::npos;
  if (pp > 1 && interleaved) {
    if (layers % (pp * v) != 0) {
      const auto ok = divisors(layers / pp,
                               [&](std::int64_t w) { return w >= 2 && layers % (pp * w) == 0; });
      fail(c, {"pipeline.virtual_stages", "parallel.pp", "model.n_layers"},
           fmt::format("model.n_layers = {} is not divisible by parallel.pp*pipeline.virtual_stages = {}*{} = {}; "
                       "the interleaved schedule gives every stage v chunks of equal size: {}",
                       layers, pp, v, pp * v,
                       ok.empty() ? fmt::format("make n_layers a multiple of {}", pp * v)
                                  : "choose virtual_stages from " + ok));
    }
    // A round (parallel.microbatches, all of grad_accum by default) is what
    // the schedule groups.
    const auto round = c.get_int("parallel.microbatches");
    if (round == accum && (accum < pp || accum % pp != 0)) {
      fail(c, {"train.grad_accum", "parallel.pp", "pipeline.schedule"},
           fmt::format("pipeline.schedule = \"interleaved\" runs micro-batches in groups of the parallel.pp = {} "
                       "stages, but train.grad_accum = {} is not a multiple of {}: set grad_accum to {}",
                       pp, accum, pp, std::max(pp, (accum + pp - 1) / pp * pp)));
    } else if (round < pp || round % pp != 0) {
      const auto ok = divisors(accum, [&](std::int64_t v) { return v % pp == 0; });
      fail(c, {"parallel.microbatches", "parallel.pp", "pipeline.schedule"},
           fmt::format("pipeline.schedule = \"interleaved\" runs micro-batches in groups of the parallel.pp = {} "
                       "stages, but its rounds of parallel.microbatches = {} are not a multiple of {}: {}",
                       pp, round, pp,
                       ok.empty() ? fmt::format("make train.grad_accum = {} a multiple of {} first", accum, pp)
                                  : "choose microbatches from " + ok));
    }
    if (explicit_split) {
      fail(c, {"pipeline.layers_per_stage", "pipeline.schedule"},
           fmt::format("pipeline.layers_per_stage = \"{}\" with pipeline.schedule = \"interleaved\": the "
                       "interleaved split is fixed (n_layers/(pp*v) layers a chunk); set layers_per_stage = \"auto\"",
                       per_stage));
    }
  }
  if (pp > 1 && explicit_split) {
    std::vector<double> counts;
    try {
      counts = number_list(per_stage);
    } catch (const Error& e) {
      fail(c, {"pipeline.layers_per_stage"},
           fmt::format("pipeline.layers_per_stage = \"{}\": {}", per_stage, e.what()));
    }
    double sum = 0;
    for (const double n : counts) {
      if (n < 1 || n != double(std::int64_t(n))) {
        fail(c, {"pipeline.layers_per_stage"},
             fmt::format("pipeline.layers_per_stage = \"{}\": '{}' is not a layer count >= 1; write one count "
                         "per stage, e.g. \"3,1\"",
                         per_stage, n));
      }
      sum += n;
    }
    if (std::int64_t(counts.size()) != pp || sum != double(layers)) {
      fail(c, {"pipeline.layers_per_stage", "parallel.pp", "model.n_layers"},
           fmt::format("pipeline.layers_per_stage = \"{}\" gives {} stages {} layers, but parallel.pp = {} and "
                       "model.n_layers = {}; give pp counts summing to n_layers (or \"auto\" for the balanced "
                       "split)",
                       per_stage, counts.size(), sum, pp, layers));
    }
  }
}

void check_training(const Config& c) {
  const auto lr = c.get_float("optim.lr"), min_lr = c.get_float("optim.min_lr");
  if (min_lr > lr) {
    fail(c, {"optim.min_lr", "optim.lr"},
         fmt::format("optim.min_lr = {} exceeds optim.lr = {}; the schedule decays from lr down to min_lr: set "
                     "min_lr <= {}",
                     to_toml_literal(Value{min_lr}), to_toml_literal(Value{lr}), to_toml_literal(Value{lr})));
  }
  const auto eval = c.get_int("train.eval_every");
  const auto val = c.get_float("data.val_fraction");
  if (eval > 0 && val == 0.0) {
    fail(c, {"train.eval_every", "data.val_fraction"},
         fmt::format("train.eval_every = {} needs validation data, but data.val_fraction = 0.0 holds none out; "
                     "set val_fraction > 0 or eval_every = 0",
                     eval));
  }
}

// [[data.streams]] replace data.path and data.format.
void check_streams(const Config& c) {
  if (c.streams().empty()) return;
  for (const char* key : {"data.path", "data.format"})
    if (c.setting(key).origin != Origin::Default)
      fail(c, {key},
           fmt::format("{} is set, but the deck's [[data.streams]] tables name the data (each its path and "
                       "format); remove {}",
                       key, key));
}

// [federated]: sites with data, a threshold that can be met, rounds that fit
// train.steps, and nothing that makes the sites' parameter parts differ.
void check_federated(const Config& c) {
  const auto sites = c.get_int("federated.sites");
  if (sites <= 1) {
    for (const char* key : {"federated.site_data", "federated.slowdown", "federated.drop", "federated.secure",
                            "federated.threshold", "federated.balance", "federated.local_steps"})
      if (const auto& s = c.setting(key); !(s.value == s.spec->def))
        fail(c, {key}, fmt::format("{} is set but federated.sites = 1 (no federation); set federated.sites to the "
                                   "number of sites, or remove {}",
                                   key, key));
    return;
  }
  const auto threshold = c.get_int("federated.threshold");
  if (threshold > sites)
    fail(c, {"federated.threshold", "federated.sites"},
         fmt::format("federated.threshold = {} is more than the {} sites: no round could ever be unmasked; choose "
                     "1 <= threshold <= {} (0 = a majority, {})",
                     threshold, sites, sites, sites / 2 + 1));
  if (c.get_int("federated.threshold") != 0 && !c.get_bool("federated.secure"))
    fail(c, {"federated.threshold", "federated.secure"},
         "federated.threshold is the secret-sharing threshold of secure aggregation, but federated.secure = false; "
         "set secure = true or remove threshold");
  // Every entry, blank ones too: "a.txt,,c.txt" leaves site 1 without data.
  const std::vector<std::string> data =
      c.get_string("federated.site_data") == "none" ? std::vector<std::string>{""}
                                                    : comma_items(c.get_string("federated.site_data"));
  const auto blank = std::find(data.begin(), data.end(), std::string());
  if (blank != data.end() || std::int64_t(data.size()) < sites)
    fail(c, {"federated.site_data", "federated.sites"},
         fmt::format("site {} has no data: federated.site_data must name one file per site, {} in all, comma-"
                     "separated; give every site its file",
                     blank != data.end() ? blank - data.begin() : std::ptrdiff_t(data.size()), sites));
  if (std::int64_t(data.size()) > sites)
    fail(c, {"federated.site_data", "federated.sites"},
         fmt::format("federated.site_data names {} files for {} sites; give one per site, or raise federated.sites",
                     data.size(), sites));
  if (!c.streams().empty())
    fail(c, {"federated.sites"},
         "federated training reads each site's data from federated.site_data, but the deck has [[data.streams]]; "
         "remove them (a site with several streams is not built)");
  if (const auto steps = c.get_int("train.steps"), local = c.get_int("federated.local_steps"); steps % local != 0)
    fail(c, {"federated.local_steps", "train.steps"},
         fmt::format("federated.local_steps = {} does not divide train.steps = {}: the run is a whole number of "
                     "rounds; set train.steps to a multiple of {}",
                     local, steps, local));
  if (const auto slow = comma_items(c.get_string("federated.slowdown")); c.get_string("federated.slowdown") != "none") {
    bool ok = std::int64_t(slow.size()) == sites;
    for (const auto& f : slow) {
      char* end = nullptr;
      const double v = std::strtod(f.c_str(), &end);
      ok = ok && end && *end == '\0' && v >= 1.0 && v <= 1000.0;
    }
    if (!ok)
      fail(c, {"federated.slowdown"},
           fmt::format("federated.slowdown = \"{}\" must be {} factors between 1 and 1000, one per site, comma-"
                       "separated (e.g. \"1,1,2\")",
                       c.get_string("federated.slowdown"), sites));
  }
  if (const auto drop = c.get_string("federated.drop"); drop != "none") {
    long long site = -1, round = -1;
    char extra = 0;
    const auto rounds = c.get_int("train.steps") / c.get_int("federated.local_steps");
    if (std::sscanf(drop.c_str(), "%lld:%lld%c", &site, &round, &extra) != 2 || site < 0 || site >= sites ||
        round < 1 || round > rounds)
      fail(c, {"federated.drop"},
           fmt::format("federated.drop = \"{}\" must be \"SITE:ROUND\" with SITE in 0..{} and ROUND in 1..{} (the "
                       "run's rounds)",
                       drop, sites - 1, rounds));
    if (c.get_bool("federated.secure")) {
      const auto t = threshold == 0 ? sites / 2 + 1 : threshold;
      if (sites - 1 < t)
        fail(c, {"federated.drop", "federated.threshold"},
             fmt::format("federated.drop takes a site out of a round, leaving {} of {}, fewer than the threshold {}: "
                         "that round could not be unmasked; lower federated.threshold or add sites",
                         sites - 1, sites, t));
    }
  }
  const std::pair<const char*, const char*> refused[] = {
      {"parallel.auto", "the planner plans one job's layout, not a site's"},
      {"growth.every", "grown experts would differ between sites"},
      {"moe.replace_every", "re-placed experts would sit on different ranks at each site"},
  };
  for (const auto& [key, why] : refused) {
    const auto& s = c.setting(key);
    if (!(s.value == s.spec->def))
      fail(c, {key, "federated.sites"},
           fmt::format("{} is not built with federated training ({}); set it back to its default or "
                       "federated.sites = 1",
                       key, why));
  }
  if (c.get_string("federated.balance") == "steps" && c.get_bool("checkpoint.resume"))
    fail(c, {"checkpoint.resume", "federated.balance"},
         "checkpoint.resume is not built with federated.balance = \"steps\" (the sites' rounds are not at the same "
         "steps, so a resume could not find a common round); set balance = \"none\" to resume");
}

// train.grad_projection: tasks to project between, and what keeps state
// across a step's micro-batches that its rounds would split.
void check_projection(const Config& c) {
  if (c.get_string("train.grad_projection") == "none") return;
  const std::vector<std::string> tasks = stream_tasks(c.streams());
  const auto K = std::int64_t(tasks.size());
  if (K < 2)
    fail(c, {"train.grad_projection"},
         fmt::format("train.grad_projection = \"pcgrad\" projects between the gradients of tasks, but the deck has "
                     "{}; give [[data.streams]] of at least two tasks (input/streams.toml), or grad_projection = "
                     "\"none\"",
                     K == 1 ? "one" : "none"));
  const auto accum = c.get_int("train.grad_accum");
  if (accum % K != 0)
    fail(c, {"train.grad_projection", "train.grad_accum"},
         fmt::format("train.grad_projection = \"pcgrad\" runs each of the {} tasks' micro-batches in a round of its "
                     "own, but train.grad_accum = {} does not split into {} equal rounds; set grad_accum to a "
                     "multiple of {}",
                     K, accum, K, K));
  // Each task's round is a step of grad_accum / K micro-batches to the
  // pipeline: its rounds and the interleaved schedule's groups must fit it.
  // (parallel.microbatches derived from grad_accum means whole passes.)
  const auto& mbs = c.setting("parallel.microbatches");
  const auto per_task = accum / K, pp = c.get_int("parallel.pp");
  const auto mb = mbs.derived.empty() ? c.get_int("parallel.microbatches") : std::int64_t(0);
  if (pp > 1 && mb > 0 && per_task % mb != 0)
    fail(c, {"train.grad_projection", "parallel.microbatches", "train.grad_accum"},
         fmt::format("train.grad_projection = \"pcgrad\" runs each task's grad_accum / {} = {} micro-batches as "
                     "one pipeline pass, which parallel.microbatches = {} does not divide; choose microbatches "
                     "dividing {}, or 0",
                     K, per_task, mb, per_task));
  if (pp > 1 && c.get_string("pipeline.schedule") == "interleaved" && (mb > 0 ? mb : per_task) % pp != 0)
    fail(c, {"train.grad_projection", "pipeline.schedule", "train.grad_accum"},
         fmt::format("train.grad_projection = \"pcgrad\" runs each task's grad_accum / {} = {} micro-batches as "
                     "one pipeline pass, but the interleaved schedule runs them in groups of parallel.pp = {}; set "
                     "train.grad_accum to a multiple of {}",
                     K, per_task, pp, K * pp));
  // A task of weight 0 would still steer the others' projections.
  for (const auto& t : tasks) {
    double w = 0;
    for (const auto& d : c.streams())
      if (d.task == t) w += d.weight;
    if (!(w > 0))
      fail(c, {"train.grad_projection"},
           fmt::format("train.grad_projection = \"pcgrad\": task '{}' has weight 0 but would still take a round "
                       "and bend the other tasks' gradients; give it a weight > 0 or remove its streams",
                       t));
  }
  if (c.get_string("comm.compression") == "topk")
    fail(c, {"train.grad_projection", "comm.compression"},
         "train.grad_projection = \"pcgrad\" with comm.compression = \"topk\" is not built yet: top-k's residuals "
         "carry one gradient from step to step, not one per task; choose another comm.compression");
}

// train.batch_tokens: the data it needs, and the layouts its micro-batches'
// varying shapes (io/token_budget.hpp) can run.
void check_batching(const Config& c) {
  const auto budget = c.get_int("train.batch_tokens");
  if (budget == 0) return;
  const auto seq = c.get_int("model.seq_len");
  if (budget < seq)
    fail(c, {"train.batch_tokens", "model.seq_len"},
         fmt::format("train.batch_tokens = {} is less than model.seq_len = {}: a micro-batch must hold at least one "
                     "whole sequence; set train.batch_tokens >= {}",
                     budget, seq, seq));
  if (c.get_string("data.documents") == "packed")
    fail(c, {"train.batch_tokens", "data.documents"},
         "train.batch_tokens batches documents of varying length, but data.documents = \"packed\" makes every "
         "sequence model.seq_len long; set data.documents = \"concat\" (the documents are read either way), or "
         "train.batch_tokens = 0 and train.micro_batch");
  const auto cp = c.get_int("parallel.cp"), tp = c.get_int("parallel.tp");
  const bool sp = tp > 1 && c.get_bool("parallel.sequence_parallel");
  const std::vector<std::int64_t> lengths = length_buckets(seq);
  for (const auto len : lengths) {
    if (cp > 1 && len % (2 * cp) != 0)
      fail(c, {"train.batch_tokens", "parallel.cp", "model.seq_len"},
           fmt::format("train.batch_tokens makes micro-batches of sequences of {} tokens (model.seq_len = {} and "
                       "its halves down to 8), which context parallelism cannot cut into 2*cp = {} chunks; choose "
                       "model.seq_len divisible by {}, or a smaller cp",
                       fmt::join(lengths, ", "), seq, 2 * cp, 2 * cp * (seq / lengths.back())));
    if (sp && len % tp != 0)
      fail(c, {"train.batch_tokens", "parallel.sequence_parallel", "model.seq_len"},
           fmt::format("train.batch_tokens makes micro-batches of sequences of {} tokens, which sequence "
                       "parallelism cannot split over tp = {} ranks; choose model.seq_len divisible by {}, or "
                       "sequence_parallel = false",
                       fmt::join(lengths, ", "), tp, tp * (seq / lengths.back())));
  }
}

// Layouts and options that each work alone but not yet together. Each
// message says which of the keys to change.
void check_combinations(const Config& c) {
  // memory.checkpoint_layers: "all", "sqrt" or a positive integer, and
  // only with full recompute.
  if (const auto cl = c.get_string("memory.checkpoint_layers"); cl != "all") {
    const bool number = cl.find_first_not_of("0123456789") == std::string::npos && cl.size() <= 9 && cl != "0";
    if (cl != "sqrt" && !number) {
      fail(c, {"memory.checkpoint_layers"},
           fmt::format("memory.checkpoint_layers = \"{}\" is not \"all\", \"sqrt\" or a positive number of "
                       "layers; use one of these",
                       cl));
    }
    if (c.get_string("memory.recompute") != "full") {
      fail(c, {"memory.checkpoint_layers", "memory.recompute"},
           fmt::format("memory.checkpoint_layers = \"{}\" recomputes segments of layers, which needs "
                       "memory.recompute = \"full\" (got \"{}\"); set it, or checkpoint_layers = \"all\"",
                       cl, c.get_string("memory.recompute")));
    }
  }
  // The hierarchical gradient collectives compress their inter-node stage
  // only (a two-stage sum would round twice); the weight gathers, which do
  // not sum, compress both stages or the inter-node one.
  const bool hier = c.get_bool("parallel.hierarchical");
  const bool inter_node = c.get_string("comm.compress_scope") == "inter_node";
  if (const auto comp = c.get_string("comm.compression"); comp != "none" && hier && !inter_node) {
    fail(c, {"comm.compression", "parallel.hierarchical"},
         fmt::format("comm.compression = \"{}\" with parallel.hierarchical = true compresses the inter-node stage "
                     "only: set comm.compress_scope = \"inter_node\" (node-local traffic stays fp32), or "
                     "parallel.hierarchical = false",
                     comp));
  }
  if (inter_node && !hier) {
    fail(c, {"comm.compress_scope", "parallel.hierarchical"},
         "comm.compress_scope = \"inter_node\" compresses the hierarchical collectives' inter-node stage, but "
         "parallel.hierarchical = false has none; set parallel.hierarchical = true, or compress_scope = \"all\"");
  } else if (inter_node && c.get_string("comm.compression") == "none" &&
             c.get_string("comm.weight_compression") == "none") {
    fail(c, {"comm.compress_scope", "comm.compression"},
         "comm.compress_scope = \"inter_node\" says where comm.compression and comm.weight_compression apply, but "
         "both are \"none\"; set comm.compression (\"bf16\", \"int8\" or \"topk\") or comm.weight_compression "
         "(\"bf16\" or \"int8\"), or remove compress_scope");
  }
  if (c.get_bool("comm.stochastic_rounding") && c.get_string("comm.compression") == "none") {
    fail(c, {"comm.stochastic_rounding", "comm.compression"},
         "comm.stochastic_rounding = true rounds the compressed gradients, but comm.compression = \"none\" sends "
         "them in fp32; set comm.compression = \"int8\" or \"bf16\", or stochastic_rounding = false");
  }
  if (!c.get_bool("memory.offload_experts"))
    refuse_set_without(c, {"memory.offload_optimizer", "memory.offload_dir", "memory.offload_prefetch"},
                       "memory.offload_experts", "memory.offload_experts = true", "");
  if constexpr (OffloadFile::host_memory_tier()) {
    if (c.setting("memory.offload_dir").origin != Origin::Default)
      fail(c, {"memory.offload_dir"},
           "memory.offload_dir names the file of the host builds' offload tier, but this CUDA build offloads the "
           "experts to host memory (CUDA managed memory), with no file; remove memory.offload_dir");
  }
  if (c.get_string("comm.compression") != "topk") {
    refuse_set_without(c, {"comm.topk_ratio", "comm.topk_warmup"}, "comm.compression", "comm.compression = \"topk\"",
                       fmt::format(" (got \"{}\")", c.get_string("comm.compression")));
  } else {
    if (c.get_bool("comm.stochastic_rounding"))
      fail(c, {"comm.stochastic_rounding", "comm.compression"},
           "comm.stochastic_rounding = true rounds bf16 or int8 payloads, but comm.compression = \"topk\" sends "
           "the kept values in fp32 and owes the rest exactly; set stochastic_rounding = false");
  }
  // Tier 1 is written synchronously; it must not overlap a background write.
  if (c.get_int("checkpoint.local_every") > 0 && c.get_bool("checkpoint.async")) {
    fail(c, {"checkpoint.local_every", "checkpoint.async"},
         fmt::format("checkpoint.local_every = {} with checkpoint.async = true: the tier-1 copy is written "
                     "synchronously, which must not overlap the background write; set checkpoint.async = false or "
                     "local_every = 0",
                     c.get_int("checkpoint.local_every")));
  }
}

}  // namespace

std::vector<double> number_list(const std::string& text) {
  std::vector<double> out;
  std::size_t at = 0;
  while (at <= text.size() && !text.empty()) {
    const auto comma = std::min(text.find(',', at), text.size());
    const std::string item = text.substr(at, comma - at);
    std::size_t used = 0;
    double v = 0;
    try {
      v = std::stod(item, &used);
    } catch (const std::exception&) {
      used = 0;
    }
    if (used == 0 || item.find_first_not_of(" \t", used) != std::string::npos)
      throw Error(fmt::format("entry {} \"{}\" is not a number; write numbers separated by commas, e.g. \"4,4\"",
                              out.size() + 1, item));
    out.push_back(v);
    at = comma + 1;
  }
  return out;
}

std::vector<std::string> comma_items(const std::string& text) {
  std::vector<std::string> out;
  for (std::size_t at = 0;;) {
    const auto next = text.find(',', at);
    const std::string item = text.substr(at, next == std::string::npos ? std::string::npos : next - at);
    const auto a = item.find_first_not_of(" \t"), b = item.find_last_not_of(" \t");
    out.push_back(a == std::string::npos ? "" : item.substr(a, b - a + 1));
    if (next == std::string::npos) return out;
    at = next + 1;
  }
}

std::vector<std::string> name_list(const std::string& text) {
  std::vector<std::string> out = comma_items(text);
  if (const auto empty = std::find(out.begin(), out.end(), std::string()); empty != out.end())
    throw Error(fmt::format("entry {} is empty; write names separated by commas, e.g. \"attention,dense_ffn\"",
                            empty - out.begin() + 1));
  return out;
}

void check_world(const Config& c) {
  const auto pp = c.get_int("parallel.pp"), dp = c.get_int("parallel.dp");
  const auto cp = c.get_int("parallel.cp"), tp = c.get_int("parallel.tp");
  if (const auto sites = c.get_int("federated.sites"); sites > 1 && c.world_size() % sites != 0)
    fail(c, {"federated.sites"},
         fmt::format("federated.sites = {} does not divide the world size {}: each site is world/sites ranks; run on "
                     "a multiple of {} ranks, or choose federated.sites from {}",
                     sites, c.world_size(), sites, divisors(c.world_size())));
  const std::int64_t world = c.layout_world_size(), pct = pp * cp * tp;
  if (dp == 0) {
    if (world % pct != 0) {
      fail(c, {"parallel.pp", "parallel.cp", "parallel.tp", "parallel.dp"},
           fmt::format("parallel.pp*cp*tp = {}*{}*{} = {} does not divide the world size {}, so parallel.dp = 0 "
                       "cannot be inferred; run on a multiple of {} ranks or change pp, cp or tp",
                       pp, cp, tp, pct, world, pct));
    }
    return;
  }
  if (pp * dp * cp * tp != world) {
    const std::string fix = world % pct == 0
                                ? fmt::format("set parallel.dp = {} (or 0 to infer it), or run on {} ranks",
                                              world / pct, pp * dp * cp * tp)
                                : fmt::format("run on {} ranks, or change the layout", pp * dp * cp * tp);
    fail(c, {"parallel.dp", "parallel.pp", "parallel.cp", "parallel.tp"},
         fmt::format("parallel.pp*dp*cp*tp = {}*{}*{}*{} = {} does not equal the world size {}; {}", pp, dp, cp, tp,
                     pp * dp * cp * tp, world, fix));
  }
}

const std::vector<std::string>& auto_layout_keys() {
  static const std::vector<std::string> keys = {
      "parallel.dp",           "parallel.tp",      "parallel.pp",       "parallel.cp",
      "parallel.ep",           "parallel.etp",     "parallel.zero",     "parallel.sequence_parallel",
      "parallel.microbatches", "parallel.cp_mode", "pipeline.schedule", "pipeline.layers_per_stage",
      "pipeline.virtual_stages"};
  return keys;
}

bool sets_layout_key(const Setting& s, bool overrides_too) {
  // A derived value (dp = 0 resolved to the world) is the default asked for.
  const bool set = s.origin == Origin::File || (overrides_too && s.origin == Origin::Override);
  return set && s.derived.empty() && !(s.value == s.spec->def);
}

void check_consistency(const Config& c) {
  check_model(c);
  check_attention(c);
  check_moe(c);
  check_parallel(c);
  check_growth(c);
  check_lora(c);
  check_pipeline(c);
  check_training(c);
  check_streams(c);
  check_projection(c);
  check_federated(c);
  check_batching(c);
  check_combinations(c);
}

}  // namespace exa::deck
