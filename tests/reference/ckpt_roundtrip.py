#!/usr/bin/env python3
"""scripts/ckpt_to_torch.py round trip (ctest reference.ckpt_to_torch).

Trains a small ExaMoE run (a dense and an MoE layer, a shared expert) for a
few steps, converts its checkpoint with scripts/ckpt_to_torch.py (the
command line: torch.save to a .pt file, the configuration to JSON), loads
the .pt back with torch.load and evaluates one batch with the PyTorch
reference model (examoe_ref, float64). `examoe eval` on the same tokens
(B = 4 windows of T = 16, one forward pass) must give the same mean
cross-entropy within --tol (1e-6 nats/token).

Then LoRA: a run of rank-4 adapters on that checkpoint (train.init_from),
whose checkpoint holds the adapters only, converted with --peft (PEFT's
names, a shared or routed expert's adapters one module per expert) and mapped back
onto the base state_dict: the reference's cross-entropy on the same batch
must equal `examoe eval`'s on the adapter checkpoint within --tol.

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
    ok = diff <= a.tol

    # LoRA on that model, exported in PEFT's layout.
    loradir = os.path.join(a.workdir, "lora")
    lora_sets = ["lora.rank=4", "lora.alpha=8.0",
                 "lora.targets=attention,dense_ffn,shared_experts,experts,router,embeddings",
                 f"train.init_from={rundir}/ckpt", f"output.run_dir={loradir}", "train.steps=3", "checkpoint.every=3"]
    sets = [x for s in RUN_SETS + lora_sets for x in ("--set", s)]
    run([a.examoe, os.path.join(SRC, "input", "tiny.toml")] + sets)
    # (the log line of reading the frozen model from train.init_from comes first)
    ev = json.loads(run([a.examoe, "eval", "--checkpoint", loradir, "--tokens", tok_file, "--batch",
                         str(B)]).strip().splitlines()[-1])
    peft, lcfg_json = os.path.join(a.workdir, "peft"), os.path.join(a.workdir, "lora_config.json")
    print(run([sys.executable, os.path.join(SRC, "scripts", "ckpt_to_torch.py"), loradir, "--peft", peft,
               "--config-out", lcfg_json]), end="")
    with open(os.path.join(peft, "adapter_config.json")) as f:
        pcfg = json.load(f)
    assert pcfg["peft_type"] == "LORA" and pcfg["r"] == 4 and pcfg["lora_alpha"] == 8.0, pcfg
    adapters = torch.load(os.path.join(peft, "adapter_model.bin"))
    with open(lcfg_json) as f:
        lcfg = Config.from_dict(json.load(f))
    params = {k: v.double() for k, v in state.items()}  # the frozen model: the base run's
    stacked = {}
    for key, t in adapters.items():
        if key.startswith("base_model.model.embed.lora_embedding_"):  # PEFT's embedding: A = B^T, B = A^T
            params["embed.lora_b" if key.endswith("_A") else "embed.lora_a"] = t.t().double()
            continue
        assert key.startswith("base_model.model.") and key.endswith(".weight"), key
        module, _, kind = key[len("base_model.model."):-len(".weight")].rpartition(".")
        ours = {"lora_A": "lora_a", "lora_B": "lora_b"}[kind]
        parts = module.split(".")
        if parts[-2].isdigit():  # layers.i.moe.shared.<s>.w1 / experts.<e>.w1 -> stacked [S, ..] / [E, ..]
            s = int(parts[-2])
            stacked.setdefault(".".join(parts[:-2] + parts[-1:]) + "." + ours, {})[s] = t.double()
        else:  # ExaMoE's adapter of W is "<W less .weight>.lora_a", PEFT's module that same stem
            params[module + "." + ours] = t.double()
    for name, by_s in stacked.items():
        params[name] = torch.stack([by_s[s] for s in sorted(by_s)])
    want = param_shapes(lcfg)
    assert set(params) == set(want), \
        f"names differ: missing {sorted(set(want) - set(params))}, unexpected {sorted(set(params) - set(want))}"
    with torch.no_grad():
        ce_ref = forward(params, lcfg, x, y)["ce"].item()
    ce = ev["ce_nats_per_token"]
    diff = abs(ce - ce_ref)
    print(f"LoRA step {ev['step']}: examoe eval {ce:.9f}, reference (float64) on the base + PEFT adapters "
          f"{ce_ref:.9f}: |diff| = {diff:.2e} (tolerance {a.tol:g})")
    return 0 if ok and diff <= a.tol else 1


if __name__ == "__main__":
    sys.exit(main())
