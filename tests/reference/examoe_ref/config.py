"""Model configuration and the checkpoint tensor catalogue.

Conventions (see ../README.md; the C++ model must match them):

* MoE layer selection: layer i (0-based) is MoE iff
      moe_every > 0 and (i + 1) % moe_every == 0,
  i.e. every moe_every-th layer counted from 1 (moe_every = 1: all layers,
  2: layers 1, 3, 5, ..., 0: none). This is the only reading under which the
  deck check "moe_every > n_layers leaves no MoE layer" holds.
* Shared experts are stored stacked like the routed ones:
      layers.{i}.moe.shared.w1 [S,F,d], w3 [S,F,d], w2 [S,d,F]
  with S = n_shared_experts and F = d_expert; absent when S = 0. Each is an
  ungated SwiGLU whose output is added to the routed output (S SwiGLUs of
  width F summed equal one SwiGLU of width S*F whose w1/w3 rows and w2
  columns are the concatenation in s order).
* Capacity: C = ceil(capacity_factor * N * k / E) evaluated in double, as
  ((c * N) * k) / E, with N = B*T tokens of the micro-batch; 0 = dropless.
"""

import math
from collections import OrderedDict
from dataclasses import dataclass, fields

# Defaults of the deck schema (src/core/deck/schema.cpp) for keys left out.
_MODEL_DEFAULTS = dict(vocab_size=256, d_model=256, n_layers=4, n_heads=4, n_kv_heads=0, d_ff=1024,
                       seq_len=256, norm_eps=1e-5, rope_theta=10000.0, tie_embeddings=False)
_MOE_DEFAULTS = dict(n_experts=8, top_k=2, d_expert=512, moe_every=1, n_shared_experts=0,
                     capacity_factor=0.0, norm_topk=True, aux_coef=0.01, z_coef=0.001)
# [lora]: rank 0 = no adapters.
_LORA_DEFAULTS = dict(rank=0, alpha=16.0, targets="attention")


@dataclass
class Config:
    vocab_size: int = 256
    d_model: int = 256
    n_layers: int = 4
    n_heads: int = 4
    n_kv_heads: int = 0  # 0 = n_heads
    d_ff: int = 1024
    seq_len: int = 256
    norm_eps: float = 1e-5
    rope_theta: float = 10000.0
    tie_embeddings: bool = False
    n_experts: int = 8
    top_k: int = 2
    d_expert: int = 512
    moe_every: int = 1
    n_shared_experts: int = 0
    capacity_factor: float = 0.0
    norm_topk: bool = True
    aux_coef: float = 0.01
    z_coef: float = 0.001
    lora_rank: int = 0
    lora_alpha: float = 16.0
    lora_targets: str = "attention"

    def __post_init__(self):
        if self.n_kv_heads == 0:
            self.n_kv_heads = self.n_heads
        if self.d_model % self.n_heads:
            raise ValueError(f"d_model={self.d_model} not divisible by n_heads={self.n_heads}")
        if self.head_dim % 2:
            raise ValueError(f"head dim {self.head_dim} must be even (RoPE)")
        if self.n_heads % self.n_kv_heads:
            raise ValueError(f"n_heads={self.n_heads} not divisible by n_kv_heads={self.n_kv_heads}")
        if self.moe_every > 0 and not 1 <= self.top_k <= self.n_experts:
            raise ValueError(f"top_k={self.top_k} must be in [1, n_experts={self.n_experts}]")

    @property
    def head_dim(self):
        return self.d_model // self.n_heads

    @property
    def lora_scale(self):
        return self.lora_alpha / self.lora_rank if self.lora_rank > 0 else 0.0

    def lora_on(self, target):
        return self.lora_rank > 0 and target in [t.strip() for t in self.lora_targets.split(",")]

    @classmethod
    def from_dict(cls, deck):
        """From the resolved deck {"model": {...}, "moe": {...}, ...}; other
        sections and unknown keys of [model]/[moe] (e.g. init_std) are ignored."""
        kw = {}
        names = {f.name for f in fields(cls)}
        for section, defaults in (("model", _MODEL_DEFAULTS), ("moe", _MOE_DEFAULTS)):
            sec = dict(defaults)
            sec.update(deck.get(section, {}))
            kw.update({k: v for k, v in sec.items() if k in names})
        sec = dict(_LORA_DEFAULTS)
        sec.update(deck.get("lora", {}))
        kw.update({"lora_" + k: v for k, v in sec.items() if "lora_" + k in names})
        return cls(**kw)

    def to_dict(self):
        d = {f.name: getattr(self, f.name) for f in fields(self)}
        return {"model": {k: d[k] for k in _MODEL_DEFAULTS}, "moe": {k: d[k] for k in _MOE_DEFAULTS},
                "lora": {k: d["lora_" + k] for k in _LORA_DEFAULTS}}


def is_moe_layer(cfg, i):
    """Layer i (0-based) is MoE iff moe_every > 0 and (i + 1) % moe_every == 0."""
    return cfg.moe_every > 0 and (i + 1) % cfg.moe_every == 0


def expert_capacity(cfg, n_tokens):
    """Slots per expert for a micro-batch of n_tokens tokens; 0 = dropless."""
    if cfg.capacity_factor <= 0:
        return 0
    return int(math.ceil(cfg.capacity_factor * n_tokens * cfg.top_k / cfg.n_experts))


def lora_names(name):
    """The adapters of a matrix: "<name less .weight>.lora_a" and ".lora_b"."""
    stem = name[: -len(".weight")] if name.endswith(".weight") else name
    return stem + ".lora_a", stem + ".lora_b"


def trainable(cfg, name):
    """Under LoRA only the adapters train; the model is frozen."""
    return cfg.lora_rank == 0 or ".lora_" in name


def param_shapes(cfg):
    """Global name -> global shape of every parameter, in canonical order.

    With [lora], each adapted matrix W [.., out, in] is followed by its
    adapters A [.., r, in] and B [.., out, r] (y = x W^T + (alpha/r) x A^T B^T)."""
    V, d, L = cfg.vocab_size, cfg.d_model, cfg.n_layers
    H, Hkv, hd = cfg.n_heads, cfg.n_kv_heads, cfg.head_dim
    E, F, S = cfg.n_experts, cfg.d_expert, cfg.n_shared_experts
    r = cfg.lora_rank
    s = OrderedDict()

    def matrix(name, shape, target=None):
        s[name] = shape
        if target is not None and cfg.lora_on(target):
            a, b = lora_names(name)
            s[a] = shape[:-2] + (r, shape[-1])
            s[b] = shape[:-1] + (r,)

    matrix("embed.weight", (V, d), "embeddings")
    for i in range(L):
        p = f"layers.{i}."
        s[p + "attn_norm.weight"] = (d,)
        matrix(p + "attn.wq.weight", (H * hd, d), "attention")
        matrix(p + "attn.wk.weight", (Hkv * hd, d), "attention")
        matrix(p + "attn.wv.weight", (Hkv * hd, d), "attention")
        matrix(p + "attn.wo.weight", (d, H * hd), "attention")
        s[p + "ffn_norm.weight"] = (d,)
        if is_moe_layer(cfg, i):
            matrix(p + "moe.router.weight", (E, d), "router")
            matrix(p + "moe.experts.w1", (E, F, d), "experts")
            matrix(p + "moe.experts.w3", (E, F, d), "experts")
            matrix(p + "moe.experts.w2", (E, d, F), "experts")
            if S > 0:
                matrix(p + "moe.shared.w1", (S, F, d), "shared_experts")
                matrix(p + "moe.shared.w3", (S, F, d), "shared_experts")
                matrix(p + "moe.shared.w2", (S, d, F), "shared_experts")
        else:
            matrix(p + "mlp.w1", (cfg.d_ff, d), "dense_ffn")
            matrix(p + "mlp.w3", (cfg.d_ff, d), "dense_ffn")
            matrix(p + "mlp.w2", (d, cfg.d_ff), "dense_ffn")
    s["norm.weight"] = (d,)
    if not cfg.tie_embeddings:
        s["lm_head.weight"] = (V, d)
    return s
