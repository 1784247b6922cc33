#!/usr/bin/env python3
"""Cross-check ExaMoE's PCGrad (optim::project_conflicts) against PyTorch.

usage: pcgrad_crosscheck.py PCGRAD_TORCH_DUMP WORKDIR

pcgrad_torch_dump writes synthetic tasks (loss_t = 0.5 |A_t x - b_t|^2,
odd tasks pulling against the even ones), the visiting orders it used and
its combined gradient. Here each task's gradient comes from autograd, and
PCGrad (Yu et al. 2020, Algorithm 1) is written out again:

    for each task i: p_i = g_i
        for j in order_i: if p_i . g_j < 0: p_i -= (p_i . g_j) / |g_j|^2 g_j
    out = sum_i w_i p_i

The combined gradients must agree to 1e-6 relative (ExaMoE holds the task
gradients in fp32), and some cases must have projected. Exit 77 (ctest
skip) when torch is unavailable.
"""
import json
import os
import subprocess
import sys

try:
    import torch
except ImportError:
    print("pcgrad_crosscheck: torch is not installed; skipping")
    sys.exit(77)


def pcgrad(grads, weights, orders):
    out = torch.zeros_like(grads[0])
    conflicts = 0
    for i, g in enumerate(grads):
        p = g.clone()
        for j in orders[i]:
            gj = grads[int(j)]
            d = torch.dot(p, gj)
            if d < 0:
                p = p - d / torch.dot(gj, gj) * gj
                conflicts += 1
        out += weights[i] * p
    return out, conflicts


def main():
    dump, workdir = sys.argv[1], sys.argv[2]
    os.makedirs(workdir, exist_ok=True)
    path = os.path.join(workdir, "pcgrad.json")
    subprocess.run([dump, path], check=True)
    with open(path) as f:
        cases = json.load(f)
    worst, projected = 0.0, 0
    for c in cases:
        n, rows = c["n"], c["rows"]
        grads = []
        for t in range(c["K"]):
            x = torch.tensor(c["x"], dtype=torch.float64, requires_grad=True)
            A = torch.tensor(c["A"][t], dtype=torch.float64).reshape(rows, n)
            b = torch.tensor(c["b"][t], dtype=torch.float64)
            loss = 0.5 * torch.sum((A @ x - b) ** 2)
            (g,) = torch.autograd.grad(loss, x)
            grads.append(g.float().double())  # the fp32 task gradients ExaMoE projects
        out, conflicts = pcgrad(grads, c["weights"], c["orders"])
        got = torch.tensor(c["out"], dtype=torch.float64)
        rel = (torch.max(torch.abs(got - out)) / torch.max(torch.abs(out))).item()
        print(f"K={c['K']} step={c['step']}: {conflicts} projections (ExaMoE {c['conflicts']}), "
              f"max |diff| / max |out| = {rel:.3e}")
        if conflicts != c["conflicts"]:
            sys.exit(f"projection counts differ: reference {conflicts}, ExaMoE {c['conflicts']}")
        worst = max(worst, rel)
        projected += conflicts > 0
    if worst > 1e-6:
        sys.exit(f"combined gradients differ by {worst:.3e} (tolerance 1e-6)")
    if projected == 0:
        sys.exit("no case projected: the synthetic tasks must conflict")
    print(f"all {len(cases)} cases agree (worst {worst:.3e}); {projected} projected")


if __name__ == "__main__":
    main()
