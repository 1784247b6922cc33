#!/usr/bin/python3
"""PyTorch side of `examoe-bench`: one-thread fp32 training steps of the
ExaMoE model, written the way a reasonable PyTorch user would write them,
for a tokens/s comparison on the same config, cores and batches.

    /usr/bin/python3 tests/reference/bench_torch.py --config cfg.json --steps N \
        [--warmup W] [--tokens tokens.bin] [--no-verify] [--profile] \
        [--threads T] [--nproc P]

--threads T runs torch's intra-op pool on T threads (set OMP_NUM_THREADS and
OPENBLAS_NUM_THREADS to T as well, for the BLAS). --nproc P trains with
DistributedDataParallel over gloo on P processes spawned here: each optimizer
step's train.grad_accum micro-batches are split into P contiguous shares, one
per rank (as ExaMoE's dp ranks split theirs), gradients are averaged by DDP,
and the reported losses are the global means. Rank 0 times the steps; the
CPU times are summed over the ranks (core-seconds).

cfg.json is the resolved deck (`examoe --check`'s JSON, what Config.to_json
writes: {"model": {...}, "moe": {...}, "train": {...}, "optim": {...}}).
tokens.bin (optional) holds the micro-batches ExaMoE trained on: int32, per
micro-batch B*T inputs then B*T targets; without it, random tokens.

The model is examoe_ref's (same parameters, names, routing, losses), with a
faster MoE than examoe_ref.model.moe (which masks the whole batch once per
expert, for clarity): assignments are sorted by expert once, tokens are
gathered with one index_select, each expert runs its SwiGLU on its contiguous
slice (the stacked weights unbound once per layer, so their gradients are
stacked once rather than zero-filled per expert), and the gated outputs are
scattered back with one index_add_ -- Megatron-LM's "local" token dispatcher
and sequential grouped GEMM. Attention is the usual batched matmul, mask,
softmax, matmul (torch 1.13 has no fused scaled_dot_product_attention). The
step is forward, backward, clip_grad_norm_, torch.optim.AdamW(foreach=True)
with decay on matrices only, at the deck's warmup/decay schedule.

Before timing, the fast model's losses on the first micro-batch are checked
against examoe_ref.model.forward (same weights) to 1e-4 relative: the
benchmark times the reference model, not an approximation of it.

Prints a human-readable summary on stderr and one JSON line on stdout.
"""

import argparse
import contextlib
import json
import math
import os
import statistics
import sys
import tempfile
import time

# One thread, set before torch loads its thread pools.
for _v in ("OMP_NUM_THREADS", "OPENBLAS_NUM_THREADS", "MKL_NUM_THREADS"):
    os.environ.setdefault(_v, "1")

import torch  # noqa: E402
import torch.nn.functional as Fn  # noqa: E402

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from examoe_ref.config import Config, expert_capacity, is_moe_layer  # noqa: E402
from examoe_ref import model as ref  # noqa: E402


# ----------------------------------------------------------------------------
# The model, written for speed (same math as examoe_ref.model)
# ----------------------------------------------------------------------------

class Statics:
    """Per-shape constants computed once: RoPE tables and the causal mask."""

    def __init__(self, cfg, T, dtype):
        self.cos, self.sin = ref.rope_cos_sin(T, cfg.head_dim, cfg.rope_theta, dtype)
        self.mask = torch.ones(T, T, dtype=torch.bool).triu(1)
        self.scale = 1.0 / math.sqrt(cfg.head_dim)


def attention(x, p, prefix, cfg, st):
    B, T, _ = x.shape
    H, Hkv, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    q = Fn.linear(x, p[prefix + "wq.weight"]).view(B, T, H, hd)
    k = Fn.linear(x, p[prefix + "wk.weight"]).view(B, T, Hkv, hd)
    v = Fn.linear(x, p[prefix + "wv.weight"]).view(B, T, Hkv, hd)
    q, k = ref.apply_rope(q, st.cos, st.sin), ref.apply_rope(k, st.cos, st.sin)
    if H != Hkv:
        k = k.repeat_interleave(H // Hkv, dim=2)
        v = v.repeat_interleave(H // Hkv, dim=2)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B,H,T,hd]
    scores = torch.matmul(q, k.transpose(-1, -2)) * st.scale
    scores = scores.masked_fill(st.mask, float("-inf"))
    out = torch.matmul(torch.softmax(scores, dim=-1), v)
    out = out.transpose(1, 2).reshape(B, T, H * hd)
    return Fn.linear(out, p[prefix + "wo.weight"])


def swiglu(x, w1, w3, w2):
    return Fn.linear(Fn.silu(Fn.linear(x, w1)) * Fn.linear(x, w3), w2)


def moe(x, p, prefix, cfg):
    """MoE FFN of x [N,d] -> (y, aux, z): sort-based dispatch, one gather,
    per-expert GEMMs on contiguous slices, one scatter-add."""
    N, d = x.shape
    E, k = cfg.n_experts, cfg.top_k
    logits = Fn.linear(x, p[prefix + "router.weight"])
    probs = torch.softmax(logits, dim=-1)
    # Top-k with ties to the lower expert id (examoe_ref.model.route).
    idx = torch.sort(probs.detach(), dim=-1, descending=True, stable=True).indices[:, :k]
    gates = probs.gather(1, idx)
    if cfg.norm_topk:
        gates = gates / gates.sum(-1, keepdim=True)
    flat_e = idx.reshape(-1)  # assignment a = n*k + j
    counts = torch.bincount(flat_e, minlength=E)
    order = torch.argsort(flat_e, stable=True)  # grouped by expert, (n, j) order within
    cap = expert_capacity(cfg, N)
    if cap > 0:
        starts = torch.cumsum(counts, 0) - counts
        rank = torch.arange(order.numel()) - starts[flat_e[order]]
        order = order[rank < cap]
        kept = counts.clamp(max=cap)
    else:
        kept = counts
    tok = torch.div(order, k, rounding_mode="floor")
    xs = x.index_select(0, tok)
    w1s, w3s, w2s = (p[prefix + "experts." + w].unbind(0) for w in ("w1", "w3", "w2"))
    outs = [swiglu(xe, w1s[e], w3s[e], w2s[e])
            for e, xe in enumerate(xs.split(kept.tolist())) if xe.shape[0] > 0]
    ys = torch.cat(outs) if outs else xs.new_zeros(0, d)
    ys = ys * gates.reshape(-1).index_select(0, order)[:, None]
    y = torch.zeros_like(x).index_add_(0, tok, ys.to(x.dtype))  # autocast gives bf16 ys
    if prefix + "shared.w1" in p:
        s1, s3, s2 = (p[prefix + "shared." + w].unbind(0) for w in ("w1", "w3", "w2"))
        for s in range(len(s1)):
            y = y + swiglu(x, s1[s], s3[s], s2[s])
    f = counts.to(probs.dtype) / (N * k)
    aux = cfg.aux_coef * E * (f * probs.mean(0)).sum()
    z = cfg.z_coef * torch.logsumexp(logits, dim=-1).pow(2).mean()
    return y, aux, z


def forward(p, cfg, st, inputs, targets):
    """Mean losses of one micro-batch (as examoe_ref.model.forward)."""
    B, T = inputs.shape
    h = Fn.embedding(inputs, p["embed.weight"])
    aux = z = 0.0
    for i in range(cfg.n_layers):
        pre = f"layers.{i}."
        h = h + attention(ref.rmsnorm(h, p[pre + "attn_norm.weight"], cfg.norm_eps), p, pre + "attn.", cfg, st)
        x = ref.rmsnorm(h, p[pre + "ffn_norm.weight"], cfg.norm_eps)
        if is_moe_layer(cfg, i):
            y, a, zz = moe(x.reshape(B * T, -1), p, pre + "moe.", cfg)
            y = y.view(B, T, -1)
            aux, z = aux + a, z + zz
        else:
            y = swiglu(x, p[pre + "mlp.w1"], p[pre + "mlp.w3"], p[pre + "mlp.w2"])
        h = h + y
    h = ref.rmsnorm(h, p["norm.weight"], cfg.norm_eps)
    head = p["embed.weight"] if cfg.tie_embeddings else p["lm_head.weight"]
    logits = Fn.linear(h, head)
    ce = Fn.cross_entropy(logits.reshape(B * T, -1), targets.reshape(-1))
    return ce + aux + z, ce, aux, z


# ----------------------------------------------------------------------------
# Training step
# ----------------------------------------------------------------------------

def lr_at(s, opt, total_steps):
    """optim/lr_schedule.hpp (Megatron's OptimizerParamScheduler)."""
    lr, min_lr, W = opt["lr"], opt["min_lr"], opt["warmup_steps"]
    t = s + 1
    if W > 0 and t <= W:
        return lr * t / W
    if opt["schedule"] == "constant":
        return lr
    if t >= total_steps:
        return min_lr
    q = (t - W) / (total_steps - W)
    if opt["schedule"] == "linear":
        return lr - (lr - min_lr) * q
    return min_lr + (lr - min_lr) * (1 + math.cos(math.pi * q)) / 2


class Net(torch.nn.Module):
    """The parameters as a module, for DistributedDataParallel (module
    attribute names may not hold dots)."""

    def __init__(self, p, cfg, st):
        super().__init__()
        self.w = torch.nn.ParameterDict({n.replace(".", "__"): torch.nn.Parameter(t.detach()) for n, t in p.items()})
        self.cfg, self.st = cfg, st

    def named(self):
        return {n.replace("__", "."): t for n, t in self.w.items()}

    def forward(self, inputs, targets):
        return forward(self.named(), self.cfg, self.st, inputs, targets)


class Trainer:
    def __init__(self, deck, seed=0, ddp=False):
        self.cfg = Config.from_dict(deck)
        self.deck = deck
        tr, op = deck.get("train", {}), deck.get("optim", {})
        self.B = int(tr.get("micro_batch", 8))
        self.M = int(tr.get("grad_accum", 1))
        self.T = self.cfg.seq_len
        self.total_steps = int(tr.get("steps", 1000))
        self.opt = dict(lr=op.get("lr", 3e-4), min_lr=op.get("min_lr", 0.0), warmup_steps=op.get("warmup_steps", 100),
                        schedule=op.get("schedule", "cosine"), beta1=op.get("beta1", 0.9), beta2=op.get("beta2", 0.95),
                        eps=op.get("eps", 1e-8), weight_decay=op.get("weight_decay", 0.1),
                        grad_clip=op.get("grad_clip", 1.0))
        std = float(deck.get("model", {}).get("init_std", 0.02))
        self.p = {n: t.requires_grad_(True)
                  for n, t in ref.random_weights(self.cfg, seed=seed, std=std, dtype=torch.float32).items()}
        self.st = Statics(self.cfg, self.T, torch.float32)
        self.ddp = None
        if ddp:
            net = Net(self.p, self.cfg, self.st)
            self.p = net.named()
            self.ddp = torch.nn.parallel.DistributedDataParallel(net)
        decay = [t for t in self.p.values() if t.dim() >= 2]
        no_decay = [t for t in self.p.values() if t.dim() < 2]
        o = self.opt
        self.adamw = torch.optim.AdamW(
            [dict(params=decay, weight_decay=o["weight_decay"]), dict(params=no_decay, weight_decay=0.0)],
            lr=o["lr"], betas=(o["beta1"], o["beta2"]), eps=o["eps"], foreach=True)
        self.n_params = sum(t.numel() for t in self.p.values())
        # precision.compute = "bf16": PyTorch's own CPU mixed precision
        # (autocast: bf16 matmul inputs through oneDNN, fp32 masters), the
        # fair counterpart of ExaMoE's bf16 products.
        self.bf16 = deck.get("precision", {}).get("compute", "fp32") == "bf16"

    def autocast(self):
        return torch.autocast("cpu", dtype=torch.bfloat16, enabled=self.bf16)

    def step(self, s, micro_batches):
        for g in self.adamw.param_groups:
            g["lr"] = lr_at(s, self.opt, self.total_steps)
        self.adamw.zero_grad(set_to_none=True)
        loss_sum = 0.0
        for i, (inputs, targets) in enumerate(micro_batches):
            if self.ddp is None:
                with self.autocast():
                    loss, _, _, _ = forward(self.p, self.cfg, self.st, inputs, targets)
                (loss / len(micro_batches)).backward()
            else:
                # Gradients are all-reduced on the last micro-batch only.
                last = i == len(micro_batches) - 1
                with contextlib.nullcontext() if last else self.ddp.no_sync():
                    with self.autocast():
                        loss, _, _, _ = self.ddp(inputs, targets)
                    (loss / len(micro_batches)).backward()
            loss_sum += loss.item()
        if self.opt["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_(self.p.values(), self.opt["grad_clip"])
        self.adamw.step()
        if self.ddp is not None:
            t = torch.tensor([loss_sum], dtype=torch.float64)
            torch.distributed.all_reduce(t)
            return float(t) / (len(micro_batches) * torch.distributed.get_world_size())
        return loss_sum / len(micro_batches)


def load_batches(path, B, T, count, V, seed):
    """count micro-batches [(inputs, targets)] from tokens.bin (cycled), or random."""
    if path:
        raw = torch.from_numpy(__import__("numpy").fromfile(path, dtype="<i4").astype("int64"))
        per = 2 * B * T
        if raw.numel() == 0 or raw.numel() % per:
            raise SystemExit(f"bench_torch: {path} holds {raw.numel()} int32, not a multiple of 2*B*T = {per}")
        have = raw.numel() // per
        mb = raw.view(have, 2, B, T)
        return [(mb[i % have, 0].clone(), mb[i % have, 1].clone()) for i in range(count)]
    g = torch.Generator().manual_seed(seed)
    out = []
    for _ in range(count):
        seq = torch.randint(0, V, (B, T + 1), generator=g)
        out.append((seq[:, :-1].clone(), seq[:, 1:].clone()))
    return out


def sgemm_gflops(n=1024, seconds=0.5, dtype=torch.float32):
    """Best-of GFLOP/s of a square matmul of dtype in this process (torch's
    BLAS or oneDNN, one thread), in wall and in process CPU time (as
    examoe-bench measures)."""
    a, b = torch.full((n, n), 0.5, dtype=dtype), torch.full((n, n), 0.25, dtype=dtype)
    c = torch.empty(n, n, dtype=dtype)
    torch.mm(a, b.t(), out=c)
    best_w = best_c = 1e30
    reps, stop = 0, time.perf_counter() + seconds
    while time.perf_counter() < stop or reps < 5:
        w0, c0 = time.perf_counter(), time.process_time()
        torch.mm(a, b.t(), out=c)
        best_w = min(best_w, time.perf_counter() - w0)
        best_c = min(best_c, time.process_time() - c0)
        reps += 1
    flop = 2.0 * n ** 3
    return flop / best_w * 1e-9, flop / max(best_c, 1e-9) * 1e-9


def verify(tr, inputs, targets, rtol=1e-4):
    """The fast forward's losses equal examoe_ref.model.forward's on the same weights."""
    with torch.no_grad():
        fast = forward(tr.p, tr.cfg, tr.st, inputs, targets)
        slow = ref.forward(tr.p, tr.cfg, inputs, targets)
    pairs = dict(loss=(fast[0], slow["loss"]), ce=(fast[1], slow["ce"]), aux=(fast[2], slow["aux"]),
                 z=(fast[3], slow["z"]))
    worst = 0.0
    for name, (a, b) in pairs.items():
        a, b = float(a), float(b)
        rel = abs(a - b) / max(abs(b), 1e-30)
        worst = max(worst, rel)
        if rel > rtol:
            raise SystemExit(f"bench_torch: fast model disagrees with examoe_ref on {name}: {a} vs {b} (rel {rel:.2e})")
    return worst


def profile_step(tr, s, mbs):
    """Top operators of one step (torch.autograd.profiler), on stderr."""
    from torch.autograd import profiler
    with profiler.profile() as prof:
        tr.step(s, mbs)
    print(prof.key_averages().table(sort_by="self_cpu_time_total", row_limit=25), file=sys.stderr)


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--config", required=True, help="resolved deck as JSON")
    ap.add_argument("--steps", type=int, default=5, help="timed optimizer steps")
    ap.add_argument("--warmup", type=int, default=2, help="untimed steps first")
    ap.add_argument("--tokens", help="int32 micro-batches written by examoe-bench (else random tokens)")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--no-verify", action="store_true", help="skip the check against examoe_ref.model.forward")
    ap.add_argument("--profile", action="store_true", help="print torch's operator profile of one extra step")
    ap.add_argument("--threads", type=int, default=1, help="torch intra-op threads per process")
    ap.add_argument("--nproc", type=int, default=1, help="DDP (gloo) processes; 1: no DDP")
    a = ap.parse_args(argv)
    if a.steps < 1 or a.warmup < 0 or a.threads < 1 or a.nproc < 1:
        ap.error("--steps, --threads and --nproc must be >= 1 and --warmup >= 0")
    if a.nproc == 1:
        return run(a, 0, 1)
    import torch.multiprocessing as mp
    with tempfile.TemporaryDirectory() as d:
        mp.spawn(ddp_rank, args=(a, os.path.join(d, "rendezvous")), nprocs=a.nproc, join=True)
    return 0


def ddp_rank(rank, a, rendezvous):
    torch.distributed.init_process_group("gloo", init_method="file://" + rendezvous, rank=rank,
                                         world_size=a.nproc)
    try:
        run(a, rank, a.nproc)
    finally:
        torch.distributed.destroy_process_group()


def run(a, rank, world):
    """Train and time on this process (rank of world); rank 0 prints."""
    torch.set_num_threads(a.threads)
    torch.manual_seed(a.seed)
    with open(a.config) as f:
        deck = json.load(f)
    tr = Trainer(deck, seed=a.seed, ddp=world > 1)
    if tr.M % world:
        raise SystemExit(f"bench_torch: train.grad_accum = {tr.M} micro-batches per step do not split over "
                         f"--nproc {world} processes; make grad_accum a multiple of --nproc")
    share = tr.M // world
    n_steps = a.warmup + a.steps
    mbs = load_batches(a.tokens, tr.B, tr.T, n_steps * tr.M, tr.cfg.vocab_size, a.seed)

    def mine(s):
        first = s * tr.M + rank * share
        return mbs[first:first + share]

    worst = None if a.no_verify or rank else verify(tr, *mbs[0])
    losses = [tr.step(s, mine(s)) for s in range(a.warmup)]
    peak, peak_cpu = sgemm_gflops(dtype=torch.bfloat16 if tr.bf16 else torch.float32)

    times, cpu = [], []
    for s in range(a.warmup, n_steps):
        w0, c0 = time.perf_counter(), time.process_time()
        losses.append(tr.step(s, mine(s)))
        times.append(time.perf_counter() - w0)
        cpu.append(time.process_time() - c0)
    if world > 1:
        t = torch.tensor(cpu, dtype=torch.float64)
        torch.distributed.all_reduce(t)
        cpu = t.tolist()
    if rank:
        return 0
    if a.profile and world == 1:
        profile_step(tr, n_steps, mbs[:tr.M])

    tokens = tr.M * tr.B * tr.T
    med, best = statistics.median(times), min(times)
    cmed, cbest = statistics.median(cpu), min(cpu)
    out = dict(framework="pytorch", torch_version=torch.__version__, threads=torch.get_num_threads(), nproc=world,
               steps=a.steps, warmup=a.warmup, tokens_per_step=tokens, step_s=times, step_cpu_s=cpu,
               median_step_s=med, best_step_s=best, median_step_cpu_s=cmed, best_step_cpu_s=cbest,
               tokens_per_s=tokens / med, tokens_per_s_best=tokens / best, tokens_per_s_cpu=tokens / cmed,
               sgemm_gflops=peak, sgemm_gflops_cpu=peak_cpu, params=tr.n_params, losses=losses,
               precision="bf16" if tr.bf16 else "fp32",
               verify_max_rel=worst)
    print(f"bench_torch: torch {torch.__version__}, {world} process(es) x {torch.get_num_threads()} thread(s), {tr.n_params / 1e6:.2f}M params; "
          f"sgemm {peak:.1f} GFLOP/s wall, {peak_cpu:.1f} CPU; step median {med:.3f} s wall, {cmed:.3f} s CPU -> "
          f"{tokens / med:.1f} / {tokens / cmed:.1f} tokens/s; losses {losses[0]:.4f} .. {losses[-1]:.4f}"
          + ("" if worst is None else f"; verified against examoe_ref (max rel {worst:.1e})"), file=sys.stderr)
    print(json.dumps(out), flush=True)
    return 0


if __name__ == "__main__":
    sys.exit(main())
