#!/usr/bin/env python3
"""Cross-check ExaMoE's optimizer step against PyTorch.

usage: torch_crosscheck.py OPTIM_TORCH_DUMP WORKDIR

For each LR schedule, optim_torch_dump runs ExaMoE's Optimizer (warmup and
decay, gradient accumulation over 2 micro-batches with a static loss scale,
global-norm clipping, AdamW with weight decay on matrices only) and writes its
inputs and results. This script repeats the run the way a PyTorch training
loop does it:

    for each step:  opt.zero_grad()
                    for each micro-batch j: (loss_j / grad_accum).backward()
                    norm = clip_grad_norm_(params, grad_clip)
                    opt.step(); sched.step()

with torch.optim.AdamW (two parameter groups: decay / no decay) and
LambdaLR(lambda s: lr(s) / lr), lr(s) written out independently from the
formula in src/optim/lr_schedule.hpp, and compares lr, norms, final weights
and both moments. Exit 77 (ctest skip) when torch is unavailable.
"""
import json
import math
import os
import subprocess
import sys

try:
    import torch
except ImportError:
    print("torch_crosscheck: torch is not installed; skipping")
    sys.exit(77)


def lr_lambda(c):
    lr, lo, W, T = c["lr"], c["min_lr"], c["warmup_steps"], c["steps"]

    def f(s):
        t = s + 1
        if t <= W:
            return t / W
        if c["schedule"] == "constant":
            return 1.0
        if t >= T:
            return lo / lr
        p = (t - W) / (T - W)
        if c["schedule"] == "linear":
            return (lr - (lr - lo) * p) / lr
        return (lo + (lr - lo) * 0.5 * (1.0 + math.cos(math.pi * p))) / lr

    return f


def check(name, got, want, rtol, atol):
    got = torch.tensor(got, dtype=torch.float64)
    want = want.detach().to(torch.float64)
    err = (got - want).abs() - (atol + rtol * want.abs())
    if err.max().item() > 0:
        k = int(err.argmax())
        raise AssertionError(f"{name}: element {k}: ExaMoE {got.flatten()[k].item():.9g}, "
                             f"torch {want.flatten()[k].item():.9g}")


def crosscheck(dump, workdir, schedule):
    out = os.path.join(workdir, f"optim_crosscheck_{schedule}.json")
    subprocess.run([dump, out, schedule], check=True)
    with open(out) as f:
        d = json.load(f)
    c = d["config"]
    torch.manual_seed(0)
    params = [torch.tensor(t["init"], dtype=torch.float32).reshape(t["shape"]).requires_grad_(True)
              for t in d["tensors"]]
    decay = [p for p, t in zip(params, d["tensors"]) if t["decay"]]
    no_decay = [p for p, t in zip(params, d["tensors"]) if not t["decay"]]
    opt = torch.optim.AdamW([{"params": decay, "weight_decay": c["weight_decay"]},
                             {"params": no_decay, "weight_decay": 0.0}],
                            lr=c["lr"], betas=(c["beta1"], c["beta2"]), eps=c["eps"], foreach=False)
    sched = torch.optim.lr_scheduler.LambdaLR(opt, lr_lambda(c))
    clipped = 0
    for s, step in enumerate(d["steps"]):
        lr_now = opt.param_groups[0]["lr"]
        assert math.isclose(lr_now, step["lr"], rel_tol=1e-12), (schedule, s, lr_now, step["lr"])
        opt.zero_grad(set_to_none=True)
        for micro in step["micro"]:
            # A surrogate loss whose gradient is this micro-batch's gradient.
            loss = sum((p * torch.tensor(g, dtype=torch.float32).reshape(p.shape)).sum()
                       for p, g in zip(params, micro))
            (loss / c["grad_accum"]).backward()
        norm = torch.nn.utils.clip_grad_norm_(params, c["grad_clip"]).item()
        assert math.isclose(norm, step["norm"], rel_tol=1e-5), (schedule, s, norm, step["norm"])
        clipped += step["clipped"]
        opt.step()
        sched.step()
    assert 0 < clipped < len(d["steps"]), f"clipping should be active on some steps only, was on {clipped}"
    for i, p in enumerate(params):
        name = d["tensors"][i]["name"]
        st = opt.state[p]
        check(f"{schedule}: {name} values", d["final"]["values"][i], p.flatten(), 1e-5, 1e-7)
        check(f"{schedule}: {name} exp_avg", d["final"]["exp_avg"][i], st["exp_avg"].flatten(), 1e-5, 1e-8)
        check(f"{schedule}: {name} exp_avg_sq", d["final"]["exp_avg_sq"][i], st["exp_avg_sq"].flatten(), 1e-5, 1e-12)
    # The no-decay tensors were updated (their gradient reached them); that
    # they were not decayed is in the value comparison above.
    for p, t in zip(params, d["tensors"]):
        if not t["decay"]:
            assert (p - 1).abs().max().item() > 1e-3, t["name"]
    print(f"torch_crosscheck: {schedule}: {len(d['steps'])} steps, clipping on {clipped}, agree with torch "
          f"{torch.__version__}")


def main():
    if len(sys.argv) != 3:
        print(__doc__)
        return 2
    for schedule in ("cosine", "linear", "constant"):
        crosscheck(sys.argv[1], sys.argv[2], schedule)
    return 0


if __name__ == "__main__":
    sys.exit(main())
