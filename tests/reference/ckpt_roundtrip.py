#!/usr/bin/env python3
"""scripts/ckpt_to_torch.py round trip (ctest reference.ckpt_to_torch).

Trains a small ExaMoE run (a dense and an MoE layer, a shared expert) for a
few steps, converts its checkpoint with scripts/ckpt_to_torch.py (the
command line: torch.save to a .pt file, the configuration to JSON), loads
the .pt back with torch.load and evaluates one batch with the PyTorch
reference model (examoe_ref, float64). `examoe eval` on the same tokens
(B = 4 windows of T = 16, one forward pass) must give the same mean
cross-entropy within --tol (1e-6 nats/token).

    ckpt_roundtrip.py --examoe EXE --workdir DIR [--tol 1e-6]

Exit 0 pass, 1 fail, 77 when torch or h5py is missing.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

try:
    import h5py  # noqa: F401 (ckpt_to_torch needs it)
    import torch
except ImportError as e:
    print(f"skipped: {e} (Debian: python3-torch python3-h5py)")
    sys.exit(77)

HERE = os.path.dirname(os.path.abspath(__file__))
SRC = os.path.normpath(os.path.join(HERE, "..", ".."))
sys.path.insert(0, HERE)
from examoe_ref.config import Config, param_shapes  # noqa: E402
from examoe_ref.model import forward  # noqa: E402

B, T = 4, 16
RUN_SETS = ["model.d_model=32", "model.n_layers=2", "model.n_heads=4", "model.d_ff=64", f"model.seq_len={T}",
            "moe.n_experts=4", "moe.top_k=2", "moe.d_expert=32", "moe.moe_every=2", "moe.n_shared_experts=1",
            "moe.capacity_factor=0.0", "train.steps=4", f"train.micro_batch={B}", "train.log_every=1",
            "train.eval_every=0", "optim.warmup_steps=1", "optim.lr=3e-3", "checkpoint.every=4"]


def run(cmd):
    print("+", " ".join(cmd), flush=True)
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.exit(f"exit code {p.returncode}\n--- stdout\n{p.stdout}--- stderr\n{p.stderr}")
    return p.stdout


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--examoe", required=True)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--tol", type=float, default=1e-6)
    a = ap.parse_args()
    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    rundir = os.path.join(a.workdir, "run")
    sets = [x for s in RUN_SETS + [f"output.run_dir={rundir}"] for x in ("--set", s)]
    run([a.examoe, os.path.join(SRC, "input", "tiny.toml")] + sets)

    # One batch: B windows of T predictions = B*T + 1 tokens of the corpus.
    with open(os.path.join(SRC, "data", "corpus.txt"), "rb") as f:
        tokens = f.read(B * T + 1)
    tok_file = os.path.join(a.workdir, "batch.txt")
    with open(tok_file, "wb") as f:
        f.write(tokens)
    ev = json.loads(run([a.examoe, "eval", "--checkpoint", rundir, "--tokens", tok_file, "--batch", str(B)]))
    assert ev["windows"] == B and ev["seq_len"] == T, ev

    pt, cfg_json = os.path.join(a.workdir, "model.pt"), os.path.join(a.workdir, "config.json")
    print(run([sys.executable, os.path.join(SRC, "scripts", "ckpt_to_torch.py"), rundir, "-o", pt,
               "--config-out", cfg_json]), end="")
    state = torch.load(pt)
    with open(cfg_json) as f:
        cfg = Config.from_dict(json.load(f))
    want = param_shapes(cfg)
    assert set(state) == set(want), \
        f"names differ: missing {sorted(set(want) - set(state))}, unexpected {sorted(set(state) - set(want))}"
    for name, shape in want.items():
        t = state[name]
        assert tuple(t.shape) == tuple(shape) and t.dtype == torch.float32, f"{name}: {t.dtype} {tuple(t.shape)}"

    x = torch.tensor(list(tokens[:-1]), dtype=torch.int64).view(B, T)
    y = torch.tensor(list(tokens[1:]), dtype=torch.int64).view(B, T)
    with torch.no_grad():
        ce_ref = forward({k: v.double() for k, v in state.items()}, cfg, x, y)["ce"].item()
    ce = ev["ce_nats_per_token"]
    diff = abs(ce - ce_ref)
    print(f"step {ev['step']}: examoe eval {ce:.9f}, reference (float64) on the converted state_dict "
          f"{ce_ref:.9f}: |diff| = {diff:.2e} (tolerance {a.tol:g})")
    return 0 if diff <= a.tol else 1


if __name__ == "__main__":
    sys.exit(main())
