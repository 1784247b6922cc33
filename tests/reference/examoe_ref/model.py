"""The ExaMoE model (docs/architecture.md, "The model") in plain, functional PyTorch.

Parameters are a dict {global name: tensor} with the checkpoint's names and
shapes (config.param_shapes). Works in float32 and float64; the router's
softmax runs in fp32, or float64 in a float64 model.

Conventions fixed here (and in ../README.md):
  * MoE layers: layer i is MoE iff moe_every > 0 and (i + 1) % moe_every == 0.
  * Shared experts: layers.{i}.moe.shared.w1/w3 [S,F,d], w2 [S,d,F], ungated,
    added to the routed output.
  * q/k/v/o head h occupies rows (columns for wo) h*hd .. (h+1)*hd - 1;
    query head h reads kv head h // (n_heads / n_kv_heads).
  * RoPE positions are 0..T-1 in every sequence.
  * Top-k: largest probability first, ties to the lower expert id.
  * Capacity dropping: an expert keeps its first C assignments in (token n,
    then slot j) order; dropped assignments contribute 0 but keep their share
    of the renormalised gates (normalisation is over all k chosen experts).
  * aux and z are reported with their coefficients, summed over MoE layers;
    loss = ce + aux + z. f_e counts assignments before capacity dropping.
"""

import math

import torch
import torch.nn.functional as Fn

from .config import expert_capacity, is_moe_layer, lora_names, param_shapes


def rmsnorm(x, w, eps):
    return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + eps) * w


def rope_cos_sin(T, hd, theta, dtype):
    """cos, sin of angle[t, i] = t * theta^(-2i/hd), shape [T, hd/2]."""
    inv_freq = 1.0 / (theta ** (torch.arange(0, hd, 2, dtype=dtype) / hd))
    angle = torch.outer(torch.arange(T, dtype=dtype), inv_freq)
    return angle.cos(), angle.sin()


def apply_rope(x, cos, sin):
    """x [B,T,heads,hd]; element i pairs with i + hd/2 ("rotate_half")."""
    half = x.shape[-1] // 2
    x1, x2 = x[..., :half], x[..., half:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat((x1 * c - x2 * s, x2 * c + x1 * s), dim=-1)


def proj(x, p, name, cfg, e=None):
    """x W^T for the matrix `name` (its slice e of a stacked [S, out, in]),
    plus its LoRA adapters' (alpha/r) (x A^T) B^T when it has them."""
    w = p[name] if e is None else p[name][e]
    y = x @ w.t()
    a_name, b_name = lora_names(name)
    if a_name in p:
        a = p[a_name] if e is None else p[a_name][e]
        b = p[b_name] if e is None else p[b_name][e]
        y = y + cfg.lora_scale * ((x @ a.t()) @ b.t())
    return y


def attention(x, p, prefix, cfg):
    """Causal GQA self-attention of x [B,T,d]."""
    B, T, _ = x.shape
    H, Hkv, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    q = proj(x, p, prefix + "wq.weight", cfg).view(B, T, H, hd)
    k = proj(x, p, prefix + "wk.weight", cfg).view(B, T, Hkv, hd)
    v = proj(x, p, prefix + "wv.weight", cfg).view(B, T, Hkv, hd)
    cos, sin = rope_cos_sin(T, hd, cfg.rope_theta, x.dtype)
    q, k = apply_rope(q, cos, sin), apply_rope(k, cos, sin)
    group = H // Hkv
    k = k.repeat_interleave(group, dim=2)  # query head h reads kv head h // group
    v = v.repeat_interleave(group, dim=2)
    q, k, v = (t.transpose(1, 2) for t in (q, k, v))  # [B,H,T,hd]
    scores = (q @ k.transpose(-1, -2)) * (1.0 / math.sqrt(hd))
    mask = torch.ones(T, T, dtype=torch.bool).triu(1)
    scores = scores.masked_fill(mask, float("-inf"))
    out = torch.softmax(scores, dim=-1) @ v  # [B,H,T,hd]
    out = out.transpose(1, 2).reshape(B, T, H * hd)
    return proj(out, p, prefix + "wo.weight", cfg)


def swiglu_named(x, p, prefix, cfg, e=None):
    """The SwiGLU of the matrices prefix + w1/w3/w2 (slice e of stacked
    ones), adapters included."""
    a = proj(x, p, prefix + "w1", cfg, e)
    b = proj(x, p, prefix + "w3", cfg, e)
    return proj(Fn.silu(a) * b, p, prefix + "w2", cfg, e)


def swiglu(x, w1, w3, w2):
    """w2(silu(w1 x) * w3 x) with nn.Linear-shaped weights."""
    return (Fn.silu(x @ w1.t()) * (x @ w3.t())) @ w2.t()


def route(probs, k, norm_topk, capacity):
    """Top-k routing of probs [N,E].

    Returns idx [N,k] (largest first, ties to the lower expert id), gates [N,k]
    (differentiable through probs), keep [N,k] bool (capacity; all True when
    capacity == 0) and routed counts [E] (before dropping)."""
    N, E = probs.shape
    idx = torch.sort(probs.detach(), dim=-1, descending=True, stable=True).indices[:, :k]
    gates = probs.gather(1, idx)
    if norm_topk:
        gates = gates / gates.sum(-1, keepdim=True)
    flat = idx.reshape(-1)  # assignment order: token n, then slot j
    onehot = Fn.one_hot(flat, E)
    counts = onehot.sum(0)
    if capacity > 0:
        rank = (onehot.cumsum(0) - 1).gather(1, flat[:, None]).squeeze(1)
        keep = (rank < capacity).view(N, k)
    else:
        keep = torch.ones(N, k, dtype=torch.bool)
    return idx, gates, keep, counts


def moe(x, p, prefix, cfg):
    """MoE FFN of x [N,d]. Returns (y [N,d], aux, z, stats)."""
    N, d = x.shape
    E, k = cfg.n_experts, cfg.top_k
    rdtype = torch.float64 if x.dtype == torch.float64 else torch.float32
    logits = proj(x, p, prefix + "router.weight", cfg).to(rdtype)  # [N,E]
    probs = torch.softmax(logits, dim=-1)
    idx, gates, keep, counts = route(probs, k, cfg.norm_topk, expert_capacity(cfg, N))
    gates = gates.to(x.dtype)

    y = torch.zeros_like(x)
    flat_e, flat_keep, flat_g = idx.reshape(-1), keep.reshape(-1), gates.reshape(-1)
    for e in range(E):
        rows = torch.nonzero((flat_e == e) & flat_keep).squeeze(1)  # ascending (n, j)
        if rows.numel() == 0:
            continue
        tok = rows // k
        ye = swiglu_named(x[tok], p, prefix + "experts.", cfg, e) * flat_g[rows, None]
        y = y.index_add(0, tok, ye)
    if prefix + "shared.w1" in p:
        for s in range(p[prefix + "shared.w1"].shape[0]):
            y = y + swiglu_named(x, p, prefix + "shared.", cfg, s)

    f = counts.to(rdtype) / (N * k)  # a constant: integer counts
    P = probs.mean(0)
    aux = cfg.aux_coef * E * (f * P).sum()
    z = cfg.z_coef * torch.logsumexp(logits, dim=-1).pow(2).mean()
    stats = {"routed": counts, "kept": Fn.one_hot(flat_e[flat_keep], E).sum(0)}
    return y, aux.to(x.dtype), z.to(x.dtype), stats


def forward(p, cfg, inputs, targets=None):
    """Forward of a micro-batch. inputs/targets: int tensors [B,T].

    Returns a dict: logits [B,T,V]; with targets also loss (= ce + aux + z),
    ce (mean over all B*T targets), aux, z (coefficients included, summed over
    MoE layers); stats {layer: {"routed": [E], "kept": [E]}}."""
    inputs = inputs.long()
    B, T = inputs.shape
    dtype = p["embed.weight"].dtype
    h = Fn.embedding(inputs, p["embed.weight"])
    if "embed.lora_b" in p:  # LoRA on the table W [V,d]: W + s B A, so row t gains s B[t] A
        h = h + cfg.lora_scale * (Fn.embedding(inputs, p["embed.lora_b"]) @ p["embed.lora_a"])
    aux = torch.zeros((), dtype=dtype)
    z = torch.zeros((), dtype=dtype)
    stats = {}
    for i in range(cfg.n_layers):
        pre = f"layers.{i}."
        h = h + attention(rmsnorm(h, p[pre + "attn_norm.weight"], cfg.norm_eps), p, pre + "attn.", cfg)
        x = rmsnorm(h, p[pre + "ffn_norm.weight"], cfg.norm_eps)
        if is_moe_layer(cfg, i):
            y, a, zz, st = moe(x.reshape(B * T, -1), p, pre + "moe.", cfg)
            y = y.view(B, T, -1)
            aux, z = aux + a, z + zz
            stats[i] = st
        else:
            y = swiglu_named(x, p, pre + "mlp.", cfg)
        h = h + y
    h = rmsnorm(h, p["norm.weight"], cfg.norm_eps)
    logits = proj(h, p, "embed.weight" if cfg.tie_embeddings else "lm_head.weight", cfg)
    out = {"logits": logits, "stats": stats}
    if targets is not None:
        ce = Fn.cross_entropy(logits.reshape(B * T, -1), targets.long().reshape(-1))
        out.update(ce=ce, aux=aux, z=z, loss=ce + aux + z)
    return out


def random_weights(cfg, seed=0, std=0.02, dtype=torch.float64, norm_noise=0.0, router_std=None):
    """Random parameters for self-tests (ExaMoE's own init lives in C++).

    Matrices ~ N(0, std) (wo, w2 scaled by 1/sqrt(2L)), router ~ N(0,
    router_std or std), norms 1 + N(0, norm_noise)."""
    g = torch.Generator().manual_seed(seed)
    out = {}
    for name, shape in param_shapes(cfg).items():
        if len(shape) == 1:
            t = 1.0 + norm_noise * torch.randn(shape, generator=g, dtype=torch.float64)
        else:
            s = std
            if name.endswith("wo.weight") or name.endswith(".w2"):
                s = std / math.sqrt(2 * cfg.n_layers)
            if name.endswith("router.weight") and router_std is not None:
                s = router_std
            t = s * torch.randn(shape, generator=g, dtype=torch.float64)
        out[name] = t.to(dtype)
    return out
