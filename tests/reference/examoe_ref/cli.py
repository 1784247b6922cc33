"""run_reference.py: forward, backward and optional AdamW steps of the
reference model on one batch, from HDF5 weights to an HDF5 result file."""

import argparse
import json
import sys

import h5py
import torch

from .config import Config, trainable
from .io import load_batch, load_weights, save_tensors
from .model import forward

# Optimizer hyper-parameters: command line > cfg.json "optim" > these.
_OPTIM_DEFAULTS = dict(lr=3e-4, beta1=0.9, beta2=0.95, eps=1e-8, weight_decay=0.1, grad_clip=0.0)


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__)
    ap.add_argument("--config", required=True, help="resolved deck as JSON: {model, moe, optim}")
    ap.add_argument("--weights", required=True, help="HDF5 with /model/<name> datasets")
    ap.add_argument("--batch", required=True, help="HDF5 with int32 inputs/targets [B,T]")
    ap.add_argument("--out", required=True, help="HDF5 result file (overwritten)")
    ap.add_argument("--dtype", choices=("float32", "float64"), default="float32")
    ap.add_argument("--adamw-steps", type=int, default=0)
    for k in _OPTIM_DEFAULTS:
        ap.add_argument("--" + k.replace("_", "-"), type=float, default=None)
    ap.add_argument("--threads", type=int, default=1, help="torch threads (default 1)")
    return ap.parse_args(argv)


def loss_and_grads(params, cfg, x, y):
    for t in params.values():
        t.grad = None
    out = forward(params, cfg, x, y)
    out["loss"].backward()
    return out


def adamw(params, cfg, x, y, steps, hp):
    """`steps` AdamW steps on the same batch at a constant lr. Weight decay on
    tensors with ndim >= 2 only; optional global-norm clipping (torch's
    clip_grad_norm_). Returns the loss before each step."""
    train = [n for n in params if trainable(cfg, n)]  # LoRA: the adapters only
    decay = [params[n] for n in train if params[n].ndim >= 2]
    no_decay = [params[n] for n in train if params[n].ndim < 2]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": hp["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=hp["lr"], betas=(hp["beta1"], hp["beta2"]), eps=hp["eps"], foreach=False)
    losses = []
    for _ in range(steps):
        out = loss_and_grads(params, cfg, x, y)
        losses.append(out["loss"].item())
        if hp["grad_clip"] > 0:
            torch.nn.utils.clip_grad_norm_([params[n] for n in train], hp["grad_clip"])
        opt.step()
    return losses


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    torch.set_num_threads(a.threads)
    dtype = getattr(torch, a.dtype)
    with open(a.config) as f:
        deck = json.load(f)
    cfg = Config.from_dict(deck)
    # torch.optim.AdamW has no variance freeze: comparing against it would
    # silently differ after the freeze.
    if int(deck.get("optim", {}).get("freeze_variance_step", 0)) > 0:
        raise SystemExit(f"{a.config}: optim.freeze_variance_step > 0 has no torch.optim.AdamW counterpart; "
                         "compare with it at 0")
    hp = dict(_OPTIM_DEFAULTS)
    hp.update({k: float(v) for k, v in deck.get("optim", {}).items() if k in hp})
    hp.update({k: getattr(a, k) for k in hp if getattr(a, k) is not None})

    params = load_weights(a.weights, cfg, dtype)
    x, y = load_batch(a.batch)
    if x.min() < 0 or x.max() >= cfg.vocab_size or y.min() < 0 or y.max() >= cfg.vocab_size:
        raise SystemExit(f"{a.batch}: token ids must lie in [0, {cfg.vocab_size})")
    for t in params.values():
        t.requires_grad_(True)

    out = loss_and_grads(params, cfg, x, y)
    res = {"logits": out["logits"]}
    for k in ("loss", "ce", "aux", "z"):
        res[k] = out[k]
    for n, t in params.items():
        if trainable(cfg, n):  # a frozen tensor has no gradient in ExaMoE
            res["grads/" + n] = t.grad
    for i, st in out["stats"].items():
        for k, v in st.items():
            res[f"stats/layers.{i}/{k}"] = v

    if a.adamw_steps > 0:
        optim = deck.get("optim", {})
        if optim.get("warmup_steps", 0) or optim.get("schedule", "constant") != "constant":
            print("run_reference: note: AdamW runs at the constant lr "
                  f"{hp['lr']}; cfg.json's warmup/schedule are not applied", file=sys.stderr)
        res["adamw/losses"] = torch.tensor(adamw(params, cfg, x, y, a.adamw_steps, hp), dtype=torch.float64)
        for n, t in params.items():
            res["adamw/final/" + n] = t

    save_tensors(a.out, res)
    with h5py.File(a.out, "a") as f:
        f.attrs["dtype"] = a.dtype
        f.attrs["config"] = json.dumps(cfg.to_dict())
        f.attrs["optim"] = json.dumps(hp)
    print(f"run_reference: loss {out['loss'].item():.8g} (ce {out['ce'].item():.8g}, aux {out['aux'].item():.6g}, "
          f"z {out['z'].item():.6g}) -> {a.out}")
    return 0
