// The one table of deck keys. Adding a key means adding one line here (and,
// where it constrains other keys, a check in deck_checks.cpp); the loader,
// the dump, the tests' "defaults are valid" check and `examoe --check` pick
// it up from this table.
#include "core/deck/schema.hpp"

#include <Kokkos_Macros.hpp>

#include <algorithm>


namespace exa::deck {
namespace {

constexpr double kDim = 1 << 20;          // widths: generous, but catches typos
constexpr double kCount = 1'000'000'000;  // step counts and cadences

enum class Open { none, lo, hi };  // which end of a float range is excluded

KeySpec I(const char* s, const char* k, std::int64_t def, double lo, double hi, const char* doc) {
  return KeySpec{s, k, Type::Int, Value{def}, lo, hi, false, false, {}, doc};
}
KeySpec F(const char* s, const char* k, double def, double lo, double hi, Open open, const char* doc) {
  return KeySpec{s, k, Type::Float, Value{def}, lo, hi, open == Open::lo, open == Open::hi, {}, doc};
}
KeySpec B(const char* s, const char* k, bool def, const char* doc) {
  return KeySpec{s, k, Type::Bool, Value{def}, 0, 0, false, false, {}, doc};
}
KeySpec S(const char* s, const char* k, const char* def, std::vector<std::string> allowed, const char* doc) {
  return KeySpec{s, k, Type::String, Value{std::string(def)}, 0, 0, false, false, std::move(allowed), doc};
}

KeySpec NotBuilt(KeySpec k, std::vector<std::string> values) {
  k.not_built = std::move(values);
  return k;
}

// Values a build without CUDA refuses (the deck reference is the same for
// every build: it lists them as CUDA builds' only).
KeySpec CudaOnly(KeySpec k, std::vector<std::string> values, std::string why) {
  k.cuda_only = std::move(values);
  k.cuda_only_why = std::move(why);
  return k;
}

std::vector<KeySpec> build() {
  using O = Open;
  return {
      // clang-format off
      I("model", "vocab_size", 256, 2, 1 << 30, "vocabulary size V; 256 = byte-level tokens (the bundled corpus)"),
      I("model", "d_model", 256, 2, kDim, "width d of the residual stream"),
      I("model", "n_layers", 4, 1, 4096, "number of transformer blocks L"),
      I("model", "n_heads", 4, 1, 4096, "attention query heads; head dim d_model/n_heads must be even (RoPE)"),
      I("model", "n_kv_heads", 0, 0, 4096, "key/value heads (grouped-query attention); 0 = n_heads"),
      I("model", "d_ff", 1024, 1, 4 * kDim, "hidden width of the dense SwiGLU FFN in layers that are not MoE"),
      I("model", "seq_len", 256, 1, 1 << 24, "tokens per training sequence (context length)"),
      F("model", "norm_eps", 1e-5, 0, 1, O::lo, "epsilon added to mean(x^2) in RMSNorm"),
      F("model", "rope_theta", 10000.0, 1, 1e12, O::lo, "RoPE base: angle = pos * rope_theta^(-2i/head_dim)"),
      B("model", "tie_embeddings", false, "use the token embedding [V,d] as the LM head too"),
      F("model", "init_std", 0.02, 0, 1, O::lo, "std of the normal init of every matrix (wo, w2 also scaled by 1/sqrt(2L))"),

      S("attention", "kind", "full", {"full", "lsh"}, "causal self-attention: full (every earlier key of the document) or lsh (Reformer-style locality-sensitive hashing: each query sees the keys that hash near its own key, in attention.lsh_hashes rounds; O(T) per layer instead of O(T^2))"),
      I("attention", "lsh_hashes", 2, 1, 64, "attention.kind = \"lsh\": hash rounds; a query sees the union of its rounds' windows, each key once"),
      I("attention", "lsh_bucket", 64, 1, 1 << 24, "attention.kind = \"lsh\": positions per attention chunk of the bucket-sorted sequence (the hash has 2*ceil(seq_len/lsh_bucket) buckets); >= model.seq_len is full causal attention"),
      I("attention", "lsh_chunks", 1, 0, 64, "attention.kind = \"lsh\": earlier chunks of the sorted order each chunk also sees (Reformer: 1)"),
      B("attention", "lsh_local", false, "attention.kind = \"lsh\": one more round in position order, so that each query also sees its neighbours (the last (lsh_chunks + 1) * lsh_bucket positions, as local attention) besides the keys that hash near its own"),

      I("moe", "n_experts", 8, 1, 1 << 16, "routed experts E per MoE layer"),
      I("moe", "top_k", 2, 1, 1 << 16, "experts each token is routed to (top_k <= n_experts)"),
      I("moe", "d_expert", 512, 1, 4 * kDim, "hidden width F of each routed or shared expert's SwiGLU"),
      I("moe", "moe_every", 1, 0, 4096, "every moe_every-th layer is MoE, the others dense (1 = all, 0 = none)"),
      I("moe", "n_shared_experts", 0, 0, 64, "dense SwiGLU experts every token passes through in each MoE layer"),
      F("moe", "capacity_factor", 0.0, 0, 1024, O::none, "0 = dropless; c > 0 caps each expert at ceil(c*tokens*k/E) slots"),
      B("moe", "norm_topk", true, "renormalise the top-k gates to sum to 1"),
      F("moe", "aux_coef", 0.01, 0, 100, O::none, "weight of the load-balancing loss aux_coef*E*sum_e(f_e*P_e)"),
      F("moe", "z_coef", 0.001, 0, 100, O::none, "weight of the router z-loss mean(logsumexp(logits)^2)"),
      S("moe", "router_bias", "none", {"none", "aux_free"}, "aux_free: per-expert bias on the top-k selection only, += bias_rate*sign(mean load - load) each step"),
      F("moe", "bias_rate", 0.0, 0, 1, O::none, "step of the aux_free bias update (> 0 with router_bias = \"aux_free\")"),
      S("moe", "bias_init", "0", {}, "aux_free starting biases of experts 0, 1, ... in every MoE layer, comma-separated (the rest 0); e.g. \"4,4\" forces an imbalance"),
      I("moe", "replace_every", 0, 0, kCount, "expert re-placement: every this many steps re-balance the experts over the EP ranks (0 = off; needs parallel.ep > 1)"),
      F("moe", "replace_threshold", 1.2, 1, 1000, O::none, "re-place a layer when its EP-rank load max/mean over the window exceeds this"),
      S("moe", "aux_scope", "micro_batch", {"micro_batch", "sequence"}, "tokens the aux loss's f_e and P_e are taken over: this rank's micro-batch, or (sequence) summed over the cp ranks sharing its sequences, as one rank computes it"),
      S("moe", "capacity_scope", "micro_batch", {"micro_batch", "sequence"}, "tokens a capacity (moe.capacity_factor > 0) is taken over: this rank's micro-batch, or (sequence) the whole sequences the cp ranks share, dropping exactly the assignments one rank drops"),
      I("moe", "a2a_chunks", 1, 1, 64, "expert parallelism: cut each all-to-all into this many parts, so that a part's dispatch and the previous part's combine travel while a part's experts compute (1 = one blocking exchange; flat or hierarchical, with or without comm.a2a_compression)"),

      I("lora", "rank", 0, 0, kDim, "rank r of the low-rank adapters W + (alpha/r) B A that fine-tune a frozen model; 0 = no adapters (every parameter trains)"),
      F("lora", "alpha", 16.0, 0, 1e6, O::lo, "the adapters' output is scaled by alpha/rank"),
      F("lora", "dropout", 0.0, 0, 1, O::hi, "dropout on the adapters' input in training (PEFT's lora_dropout): each element kept with probability 1 - dropout and scaled by 1/(1 - dropout); the embedding's adapters take none"),
      S("lora", "targets", "attention", {}, "comma-separated projections that get adapters: attention (wq, wk, wv, wo), dense_ffn (the dense layers' w1, w3, w2), shared_experts (each shared expert's w1, w3, w2)"),
      NotBuilt(S("lora", "init", "zero_b", {"zero_b", "pissa"}, "zero_b: B = 0, A random, so step 0 is the frozen model; pissa: from W's principal singular vectors"), {"pissa"}),

      I("growth", "every", 0, 0, kCount, "expert growth: every this many steps each MoE layer gains growth.add experts, in the running job (0 = off)"),
      I("growth", "add", 8, 1, 1 << 16, "experts added to each MoE layer per growth event (at most the experts it has)"),
      I("growth", "max_experts", 0, 0, 1 << 16, "growth stops at this many experts per MoE layer (> moe.n_experts when growth.every > 0)"),
      S("growth", "init", "split", {"split", "copy", "random"}, "new experts: split (the growth.add most-loaded experts each get a clone, router row included, that takes half their tokens: the model's function is kept), copy (the same clones, router rows drawn afresh), random (drawn as at step 0)"),
      F("growth", "noise", 0.0, 0, 1, O::none, "split and copy: std of the noise added to a parent's expert weights and subtracted from its clone's (0 keeps the function exactly)"),
      I("growth", "distill_steps", 0, 0, kCount, "steps after each growth event whose loss adds a distillation term from the model before it (a frozen teacher, same layout; 0 = off, at most growth.every)"),
      F("growth", "distill_coef", 1.0, 0, 1000, O::none, "weight of the distillation term: loss += distill_coef * T^2 * KL(teacher_T || student_T) over the valid targets (with growth.distill_steps > 0)"),
      F("growth", "distill_temperature", 2.0, 0, 1000, O::lo, "softmax temperature T of the distillation term (with growth.distill_steps > 0)"),

      I("parallel", "dp", 0, 0, kDim, "data-parallel size; 0 = infer world/(pp*cp*tp)"),
      I("parallel", "tp", 1, 1, 4096, "tensor-parallel size (splits heads and FFN columns)"),
      I("parallel", "pp", 1, 1, 4096, "pipeline-parallel stages (split the layers)"),
      I("parallel", "cp", 1, 1, 4096, "context-parallel size (splits each sequence)"),
      I("parallel", "ep", 1, 1, kDim, "expert-parallel size, carved out of dp*cp; each EP rank holds n_experts/ep experts"),
      I("parallel", "etp", 0, 0, 4096, "expert tensor parallelism: routed experts' FFN split over blocks of etp consecutive tp ranks (etp divides tp; the tp/etp blocks compute alike); 0 = tp, 1 = whole experts"),
      B("parallel", "sequence_parallel", false, "with tp > 1: norms and residuals on seq_len/tp of each sequence per rank (allgather before, reduce-scatter after the split matrices)"),
      I("parallel", "zero", 0, 0, 3, "ZeRO stage over dp: 1 shards optimizer state, 2 also gradients, 3 also parameters"),
      I("parallel", "ranks_per_node", 0, 0, 4096, "ranks sharing a node; 0 = detect (MPI_Comm_split_type)"),
      B("parallel", "hierarchical", false, "node-local then inter-node collectives"),
      I("parallel", "microbatches", 0, 0, kDim, "pipeline micro-batches per round, each round a whole pipeline pass; 0 = train.grad_accum (one round); must divide it"),
      B("parallel", "auto", false, "choose the layout at start-up for the launched ranks with the planner (examoe-plan, docs/planner.md): every [parallel] and [pipeline] layout key is its choice, so leave them at their defaults; the deck's precision, recompute and compression stay"),
      S("parallel", "cluster", "calibrate", {}, "with parallel.auto: the cluster file to plan for (input/clusters/*.toml), or \"calibrate\": measure this machine at start-up"),
      S("parallel", "cp_mode", "ring", {"ring", "a2a"}, "context-parallel attention: ring (K/V blocks circulate, zigzag causal balance) or a2a (all-to-all to head-sharded, DeepSpeed-Ulysses; cp must divide n_kv_heads/tp)"),

      S("pipeline", "schedule", "1f1b", {"gpipe", "1f1b", "zb", "interleaved"}, "pipeline schedule with parallel.pp > 1: gpipe (all forwards, then all backwards), 1f1b (at most pp - stage micro-batches alive), zb (1f1b with weight gradients deferred into the bubbles, ZB-H1) or interleaved (Megatron's interleaved 1F1B over pipeline.virtual_stages chunks per stage; micro-batches per round (parallel.microbatches) a multiple of pp)"),
      S("pipeline", "layers_per_stage", "auto", {}, "layers of each pipeline stage, e.g. \"3,1\" (pp counts summing to n_layers); \"auto\" = balance counted FLOPs and parameter bytes"),
      I("pipeline", "virtual_stages", 1, 1, 4096, "model chunks per pipeline stage (schedule \"interleaved\", >= 2): chunk c of stage r holds layer block c*pp + r of n_layers/(pp*v); bubble about 1/v of 1f1b's"),

      I("train", "steps", 1000, 0, kCount, "optimizer steps to run"),
      I("train", "micro_batch", 8, 1, kDim, "sequences per micro-batch on each data-parallel rank (with train.batch_tokens: evaluation's only)"),
      I("train", "grad_accum", 1, 1, kDim, "micro-batches per optimizer step; global batch = dp*micro_batch*grad_accum"),
      S("train", "grad_projection", "none", {"none", "pcgrad"}, "pcgrad: each task's ([[data.streams]] task) gradient computed in a round of its own and projected off the others it conflicts with (Yu et al. 2020) before they are summed; needs >= 2 tasks and grad_accum divisible by their count"),
      I("train", "batch_tokens", 0, 0, kCount, "dynamic batching: micro-batches of whole documents (split only past seq_len) bucketed by length (seq_len, /2, /4, /8), each up to this many tokens with padding, instead of train.micro_batch windows (evaluation keeps those); the loss is the mean over the step's tokens; 0 = off"),
      I("train", "seed", 1234, 0, 4294967295.0, "seed of the counter-based RNG (initialisation, data order)"),
      I("train", "log_every", 10, 1, kCount, "steps between log lines"),
      I("train", "eval_every", 100, 0, kCount, "steps between validation evaluations; 0 = never"),
      I("train", "eval_batches", 8, 1, kDim, "global batches (micro_batch*grad_accum*dp sequences) per validation evaluation"),
      S("train", "init_from", "none", {}, "a checkpoint (one step's directory, or a checkpoint dir whose newest complete step is taken) whose model the run starts from, in any layout; its shape must be the deck's. none = the seeded initialisation"),

      F("optim", "lr", 3e-4, 0, 10, O::lo, "peak learning rate, reached at the end of warmup"),
      F("optim", "min_lr", 0.0, 0, 10, O::none, "learning rate the schedule decays to (<= lr)"),
      I("optim", "warmup_steps", 100, 0, kCount, "steps of linear warmup from 0 to lr"),
      S("optim", "schedule", "cosine", {"cosine", "linear", "constant"}, "decay from lr to min_lr after warmup"),
      F("optim", "beta1", 0.9, 0, 1, O::hi, "AdamW first-moment decay"),
      F("optim", "beta2", 0.95, 0, 1, O::hi, "AdamW second-moment decay"),
      F("optim", "eps", 1e-8, 0, 1, O::lo, "AdamW denominator epsilon"),
      F("optim", "weight_decay", 0.1, 0, 10, O::none, "decoupled (AdamW) weight decay"),
      I("optim", "freeze_variance_step", 0, 0, kCount,
        "AdamW's second moment stops updating after this many updates (1-bit Adam's variance freeze: with "
        "comm.compression = \"topk\", late gradients then move the weights as far as on-time ones); 0 = never"),
      F("optim", "grad_clip", 1.0, 0, 1e6, O::none, "clip the global gradient norm to this; 0 = no clipping"),

      S("data", "path", "data/corpus.txt", {}, "training data file; the default is the bundled English corpus"),
      S("data", "tokenizer", "none", {}, "the SentencePiece model a subword shard was encoded with (examoe-tokenize): checked against model.vocab_size when the data is opened, and examoe-generate speaks through it; \"none\": no tokenizer (bytes, or a shard made elsewhere)"),
      S("data", "format", "text", {"text", "shard", "hdf5"}, "text: bytes as tokens (V=256); shard: uint16/32 token file; hdf5: token dataset"),
      F("data", "val_fraction", 0.05, 0, 0.5, O::none, "share of the data held out for validation"),
      S("data", "documents", "concat", {"concat", "packed"}, "concat: windows across document boundaries; packed: whole documents packed into each sequence (best fit), attention masked to each document, positions restarting at each (text: blank lines separate documents; shard: its .docs index)"),

      S("checkpoint", "dir", "ckpt", {}, "checkpoint directory; a relative path is taken under output.run_dir"),
      I("checkpoint", "every", 1000, 0, kCount, "steps between checkpoints; 0 = never"),
      I("checkpoint", "keep", 3, 0, kDim, "newest complete checkpoints kept, older ones deleted; 0 = keep all"),
      B("checkpoint", "resume", false, "continue from the newest complete checkpoint in dir when there is one"),
      B("checkpoint", "async", false, "snapshot parameters and optimizer state, write them on a background thread while training goes on"),
      S("checkpoint", "async_policy", "wait", {"wait", "skip"}, "a checkpoint due while the previous async write is in flight: wait for it, or skip this one"),
      S("checkpoint", "local_dir", "ckpt_local", {}, "the fast tier (tier 1: node-local disk or burst buffer, visible to every rank), written every local_every steps; a relative path is taken under output.run_dir"),
      I("checkpoint", "local_every", 0, 0, kCount, "steps between tier-1 checkpoints in local_dir; 0 = no tier 1. A resume takes the newest checkpoint of either tier (tier 1 first) and repairs damaged chunks from the other tier's copy of the same step"),
      I("checkpoint", "memory_every", 0, 0, kCount, "steps between tier-0 memory snapshots: each rank keeps its state in memory_dir and sends a copy to a buddy rank on another node; 0 = no tier 0. A resume takes tier 0 when its step is the newest and every piece verifies"),
      S("checkpoint", "memory_dir", "/dev/shm", {}, "where tier-0 snapshots live: POSIX shared memory (node memory that outlives the job), one file per rank and copy, named for the run directory"),
      I("checkpoint", "memory_ranks_per_node", 0, 0, kDim, "ranks per (pretend) node for choosing tier-0 buddies (rank r's copy goes to rank r + this); 0 = the detected node split"),

      S("precision", "compute", "fp32", {"fp32", "bf16", "fp16"}, "type of the matrix products' inputs: fp32; bf16 (inputs rounded to bf16, fp32 accumulation, through oneDNN on CPUs; activations, softmax, norms, the router, the loss and the master weights stay fp32); fp16 (likewise in IEEE half precision, whose range overflows: use precision.loss_scaling = \"dynamic\")"),
      CudaOnly(S("precision", "matmul", "fp32", {"fp32", "tf32"}, "arithmetic of fp32 matrix products: fp32; tf32 (a GPU's TF32 tensor cores, through cuBLAS)"), {"tf32"}, "TF32 is the arithmetic of a GPU's tensor cores (cuBLAS)"),
      F("precision", "loss_scale", 1.0, 0, 16777216, O::lo, "factor on the loss before backward, divided out of gradients; under dynamic scaling its start (e.g. 65536)"),
      S("precision", "loss_scaling", "static", {"static", "dynamic"}, "static: loss_scale throughout; dynamic: a step whose gradient overflows is skipped and the scale halved, and the scale doubles after loss_scale_window clean steps"),
      I("precision", "loss_scale_window", 1000, 1, 1 << 30, "clean steps in a row before dynamic loss scaling doubles the scale"),

      S("memory", "recompute", "none", {"none", "selective", "full"}, "activation recomputation: none (keep every layer's activations for backward); selective (keep the matrix products' inputs, and compute the norms' outputs and the SwiGLU products again in backward: element-wise work, the same gradients); full (keep only each layer's input and run its forward again right before its backward: the same gradients, one more forward of compute)"),
      S("memory", "checkpoint_layers", "all", {}, "with recompute = \"full\": keep the input of every layer (\"all\"), or of every N-th layer only (an integer N, or \"sqrt\" for N = ceil(sqrt(layers per stage))), recomputing a segment's other inputs in backward"),
      F("memory", "cap_gb", 0.0, 0, 1e6, O::none, "per-rank memory cap (GiB, the memory ledger's sum over every category): a rank that needs more stops the run at the end of the step with the ledger's table and the policies that would fit (examoe --check estimates the table beforehand); 0 = none"),
      B("memory", "offload_experts", false, "keep the routed experts' weights and gradients out of the compute memory and bring in only the experts a layer uses, while it runs: host builds keep them in a file under memory.offload_dir (as ZeRO-Infinity's NVMe offload), CUDA builds in host memory (managed memory, prefetched to the GPU on a stream of its own); the same arithmetic, so the same losses"),
      B("memory", "offload_optimizer", false, "with offload_experts: the routed experts' AdamW moments live in the offload tier too (the file, or host memory on CUDA builds), and are updated expert tensor by expert tensor"),
      S("memory", "offload_dir", "/tmp", {}, "directory of the offload file of host builds (one per rank, removed at exit): node-local disk, not a shared file system; CUDA builds offload to host memory and refuse it"),
      I("memory", "offload_prefetch", 2, 1, 64, "with offload_experts: layers whose used experts the backward pass brings in ahead (1: only the running layer's)"),

      F("comm", "bucket_mb", 25.0, 0, 4096, O::lo, "gradient all-reduce bucket size in MiB"),
      B("comm", "overlap", true, "overlap gradient communication with the backward pass"),
      S("comm", "compression", "none", {"none", "bf16", "int8", "topk"}, "wire format of the data-parallel gradient collectives (allreduce and reduce-scatter; fp32 sums): none; bf16 (half the bytes); int8 (block-quantized, one fp32 scale per comm.quant_block values, about a quarter); topk (the largest comm.topk_ratio of each rank's gradient plus its error-feedback residual, 6 bytes a value sent)"),
      F("comm", "topk_ratio", 0.01, 0, 1, O::lo, "comm.compression = \"topk\": the fraction of each 64 Ki-value segment of a gradient payload sent (by magnitude); the rest is kept as the rank's residual and added to the next step's gradient"),
      S("comm", "compress_scope", "all", {"all", "inter_node"}, "which stages comm.compression and comm.weight_compression encode: all (the flat collectives, and both stages of hierarchical weight gathers); inter_node (with parallel.hierarchical = true: the inter-node stage only, node-local traffic stays fp32, ZeRO++'s hpZ idea; the flat expert-data collectives then stay exact)"),
      I("comm", "topk_warmup", 0, 0, kCount, "comm.compression = \"topk\": the first this many steps reduce dense, uncompressed gradients"),
      S("comm", "weight_compression", "none", {"none", "bf16", "int8"}, "wire format of the ZeRO parameter allgathers (zero 3 before use, zero 1/2 after the step; ZeRO++ qwZ): the working copies are the decoded values, the fp32 masters are never quantized"),
      S("comm", "a2a_compression", "none", {"none", "bf16", "int8"}, "wire format of the expert all-to-all's token rows (dispatch, combine and their backward; flat or hierarchical, whole or in parts)"),
      B("comm", "stochastic_rounding", false, "bf16 or int8 gradient compression rounds stochastically (up with probability equal to the distance from the value below: unbiased sums), drawn by Philox from the seed, the step, the rank and the collective, so a resumed run draws the same"),
      I("comm", "quant_block", 256, 1, 1 << 20, "values per fp32 scale in int8 payloads (comm.compression, comm.weight_compression)"),
      S("comm", "backend", "mpi", {"mpi", "nccl"}, "the collectives and point-to-point of every parallel strategy (dp, tp, ep, pp, cp): mpi, or nccl (CUDA builds with NCCL; device buffers, no host staging)"),
      B("comm", "hierarchical_a2a", false, "expert all-to-all in two stages: node-local gather/scatter around one inter-node message per node pair"),

      F("resilience", "timeout_s", 600.0, 0, 1e7, O::none, "seconds a collective may block before the run aborts; 0 = no limit"),
      B("resilience", "nan_check", true, "stop with a message when the loss or gradient norm is not finite"),
      S("resilience", "nan_policy", "abort", {"abort", "skip", "rollback"}, "a step whose loss or gradient norm is not finite (under nan_check): abort; skip it (no update, counted in the metrics); rollback: skip, and after nan_rollback_after such steps in a row reload the newest checkpoint"),
      I("resilience", "nan_rollback_after", 1, 1, kCount, "consecutive non-finite steps that trigger a rollback (nan_policy = \"rollback\")"),
      I("resilience", "replica_check_every", 0, 0, kCount, "steps between checks that the data-parallel replicas' parameters agree (per-tensor checksums); a corrupt copy is named in the log and repaired from a majority replica (zero 0) or the master parts (zero 1/2); 0 = off"),

      I("federated", "sites", 1, 1, 4096, "federated training: the world splits into this many sites of world/sites consecutive ranks, each training on its own federated.site_data in the deck's [parallel] layout, their models averaged every federated.local_steps steps (FedAvg); 1 = off"),
      I("federated", "local_steps", 10, 1, kCount, "steps each site trains between two averagings (a round); must divide train.steps"),
      B("federated", "secure", false, "average by secure aggregation (pairwise X25519/ChaCha20 masks, Shamir-shared seeds; needs libsodium): the aggregator learns only the sum; false: plain averaging of the same fixed-point values"),
      I("federated", "threshold", 0, 0, 4096, "with secure: sites that must survive a round for its sum to be unmasked (the Shamir threshold); 0 = a majority, sites/2 + 1"),
      S("federated", "site_data", "none", {}, "comma-separated data files, one per site, in site order (each read with data.format, its own validation split held out); none = no federation"),
      S("federated", "balance", "none", {"none", "steps"}, "steps: after each round, a site's steps in the next are local_steps times the fastest site's step time over its own, so that slow sites do not idle the fast ones; none: local_steps everywhere"),
      S("federated", "slowdown", "none", {}, "comma-separated factors >= 1, one per site: each step of a site is made that many times longer by sleeping (pretend-slow sites, to measure federated.balance); none = every site at its own speed"),
      S("federated", "drop", "none", {}, "\"SITE:ROUND\": site SITE (0-based) drops out of round ROUND (1-based) after the key exchange, so the round completes from the survivors (secure: their shares unmask it) and the site takes the average after it; tests the recovery; none = no site drops"),

      S("output", "run_dir", "run", {}, "directory for metrics.jsonl, logs and (by default) checkpoints"),
      I("output", "metrics_every", 0, 0, kCount, "steps between metrics.jsonl records; 0 = train.log_every"),
      I("output", "trace_steps", 0, 0, kCount, "record a timeline of the first N steps of the run: run_dir/trace.rank<R>.json per rank, every phase and each expert all-to-all part in flight, in the Chrome trace format (chrome://tracing or ui.perfetto.dev); 0 = none"),
      F("output", "power_w_per_rank", 0.0, 0, 1e6, O::none, "power (W) one rank draws, for the energy estimate; 0 = measure with RAPL (/sys/class/powercap) when readable, else none"),
      F("output", "pue", 1.0, 1, 10, O::none, "power usage effectiveness (facility power / IT power) applied to the energy estimate"),
      // clang-format on
  };
}

}  // namespace

bool KeySpec::needs_cuda(const Value& v) const {
  if (type != Type::String) return false;
  const auto& s = std::get<std::string>(v);
  return std::find(cuda_only.begin(), cuda_only.end(), s) != cuda_only.end();
}

bool KeySpec::refuses(const Value& v) const {
  if (type != Type::String) return false;
  const auto& s = std::get<std::string>(v);
  for (const auto& n : not_built)
    if (n == s) return true;
#if defined(KOKKOS_ENABLE_CUDA)
  return false;
#else
  return needs_cuda(v);
#endif
}

bool KeySpec::only_default() const {
  if (type != Type::String || allowed.empty() || not_built.empty()) return false;
  for (const auto& a : allowed)
    if (!(Value{a} == def) && !refuses(Value{a})) return false;
  return true;
}

const std::vector<KeySpec>& schema() {
  static const std::vector<KeySpec> table = build();
  return table;
}

const std::vector<std::string>& sections() {
  static const std::vector<std::string> names = {"model",     "attention", "moe",    "lora",   "growth", "parallel", "pipeline", "train",
                                                 "optim",     "data",   "checkpoint", "precision",
                                                 "memory",    "comm",   "resilience", "federated", "output"};
  return names;
}

bool is_section(std::string_view section) {
  for (const auto& s : sections()) {
    if (s == section) return true;
  }
  return false;
}

const KeySpec* find_key(std::string_view section, std::string_view key) {
  for (const auto& k : schema()) {
    if (k.section == section && k.key == key) return &k;
  }
  return nullptr;
}

const KeySpec* find_key(std::string_view dotted) {
  const auto dot = dotted.find('.');
  if (dot == std::string_view::npos) return nullptr;
  return find_key(dotted.substr(0, dot), dotted.substr(dot + 1));
}

}  // namespace exa::deck
