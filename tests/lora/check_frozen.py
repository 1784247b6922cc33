#!/usr/bin/env python3
"""LoRA's frozen model stays frozen, and only the adapters communicate.

1. One rank trains a small model for 3 steps and checkpoints it (the base).
2. Two data-parallel ranks (ZeRO 0: every gradient is allreduced) fine-tune
   it with adapters for 3 steps from train.init_from and checkpoint.
3. Then:
   - every tensor of the base is bitwise the same in the fine-tuned
     checkpoint (values and stored checksums), and the adapters' B moved
     off zero;
   - the optimizer state holds the adapters only;
   - each step's data-parallel gradient traffic is the adapters' allreduce
     (2 (P-1)/P of their fp32 bytes), not one byte of the base's;
   - a resume with another train.init_from is refused, naming the key.
Exit 77 (skipped) without h5py.
"""
import argparse
import json
import os
import shutil
import subprocess
import sys

try:
    import h5py
    import numpy as np
except ImportError:
    print("h5py/numpy missing: skipped")
    sys.exit(77)

p = argparse.ArgumentParser()
p.add_argument("--examoe", required=True)
p.add_argument("--deck", required=True)
p.add_argument("--launcher", required=True)
p.add_argument("--workdir", required=True)
a = p.parse_args()

SMALL = ["model.d_model=64", "model.n_layers=2", "model.n_heads=8", "model.n_kv_heads=4", "model.seq_len=32",
         "moe.moe_every=2", "moe.d_expert=32", "moe.n_experts=4", "moe.n_shared_experts=1",
         "train.micro_batch=2", "train.log_every=1", "train.eval_every=0", "optim.warmup_steps=1",
         "train.steps=3", "checkpoint.every=3"]
LORA = ["lora.rank=4", "lora.targets=attention,dense_ffn,shared_experts", "parallel.zero=0"]


def run(cmd, expect_ok=True):
    r = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    if expect_ok and r.returncode != 0:
        print(r.stdout)
        sys.exit(f"failed ({r.returncode}): {' '.join(cmd)}")
    return r


def examoe(sets, ranks=1, expect_ok=True):
    cmd = ([*a.launcher.split(), "-n", str(ranks)] if ranks > 1 else []) + [a.examoe, a.deck]
    for s in SMALL + sets:
        cmd += ["--set", s]
    return run(cmd, expect_ok)


shutil.rmtree(a.workdir, ignore_errors=True)
os.makedirs(a.workdir)
base, ft = os.path.join(a.workdir, "base"), os.path.join(a.workdir, "ft")
examoe([f"output.run_dir={base}"])
examoe([f"output.run_dir={ft}", f"train.init_from={base}/ckpt"] + LORA, ranks=2)

bfile = os.path.join(base, "ckpt", "step_00000003", "state.h5")
ffile = os.path.join(ft, "ckpt", "step_00000003", "state.h5")
failures = []
adapter_elems = 0
with h5py.File(bfile, "r") as b, h5py.File(ffile, "r") as f:
    base_names = set(b["model"].keys())
    for name in sorted(f["model"].keys()):
        d = f["model"][name]
        if ".lora_" in name:
            adapter_elems += d.size
            if name.endswith(".lora_b") and not np.any(d[...]):
                failures.append(f"{name} is still zero after 3 steps: the adapters did not train")
            continue
        if name not in base_names:
            failures.append(f"{name} is in the fine-tuned model but not in the base")
            continue
        if not np.array_equal(d[...], b["model"][name][...]):
            failures.append(f"{name} changed under LoRA (max |diff| "
                            f"{np.max(np.abs(d[...] - b['model'][name][...]))})")
        for attr in ("checksum",):
            if attr in d.attrs and d.attrs[attr] != b["model"][name].attrs[attr]:
                failures.append(f"{name}: stored {attr} differs from the base's")
    optim = set(f["optim"]["exp_avg"].keys())
    non_adapter = sorted(n for n in optim if ".lora_" not in n)
    if non_adapter:
        failures.append(f"optimizer state for frozen tensors: {non_adapter[:3]}")
    if not optim:
        failures.append("no optimizer state for the adapters")
print(f"base tensors compared: {len(base_names)}, adapter elements: {adapter_elems}")

# Gradient traffic per step: the adapters' allreduce over 2 ranks, 2 (P-1)/P n
# fp32 elements = n * 4 bytes.
want = adapter_elems * 4.0
steps = 0
with open(os.path.join(ft, "metrics.jsonl")) as m:
    for line in m:
        r = json.loads(line)
        if "comm" in r and "step" in r:
            got = r["comm"].get("dp_grads", {}).get("logical_bytes", 0.0)
            steps += 1
            if abs(got - want) > 0.5:
                failures.append(f"step {r['step']}: {got:.0f} bytes of gradients communicated, the adapters' "
                                f"allreduce is {want:.0f}")
if steps == 0:
    failures.append("metrics.jsonl holds no step with comm bytes")
print(f"steps with dp_grads traffic checked: {steps} ({want:.0f} bytes each)")

# A resume must adapt the same model: another init_from is refused.
other = os.path.join(a.workdir, "other")
examoe([f"output.run_dir={other}", "train.seed=99"])
r = examoe([f"output.run_dir={ft}", f"train.init_from={other}/ckpt", "checkpoint.resume=true",
            "train.steps=4"] + LORA, ranks=2, expect_ok=False)
if r.returncode == 0 or "train.init_from" not in r.stdout:
    failures.append("a resume with another train.init_from was not refused:\n" + r.stdout[-2000:])

for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
