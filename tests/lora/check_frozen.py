#!/usr/bin/env python3
"""LoRA's frozen model stays frozen, only the adapters communicate, and
merging them keeps the model's function.

1. One rank trains a small model for 3 steps and checkpoints it (the base).
2. Two data-parallel ranks (ZeRO 0: every gradient is allreduced) fine-tune
   it with adapters for 3 steps from train.init_from and checkpoint. Then:
   - the checkpoint holds the adapters only (each B moved off zero), their
     optimizer state and nothing of the frozen model;
   - each step's data-parallel gradient traffic is the adapters' allreduce
     (2 (P-1)/P of their fp32 bytes), not one byte of the base's;
   - examoe-ckpt merge-lora folds them into the base, and examoe eval of
     the merged checkpoint equals that of the adapters to 1e-6 relative;
     merging onto another model is refused;
   - a resume with another train.init_from is refused, naming the key.
3. Two LoRA runs on the seeded model (whose checkpoints hold all of it),
   of 1 and 3 steps on 2 ranks: every frozen tensor is bitwise the same in
   both, while their adapters differ.
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
p.add_argument("--ckpt-tool", required=True)
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

ffile = os.path.join(ft, "ckpt", "step_00000003", "state.h5")
failures = []
adapter_elems = 0
with h5py.File(ffile, "r") as f:
    for name in sorted(f["model"].keys()):
        d = f["model"][name]
        if ".lora_" not in name:
            failures.append(f"{name}: the frozen model is in the adapter checkpoint")
            continue
        adapter_elems += d.size
        if name.endswith(".lora_b") and not np.any(d[...]):
            failures.append(f"{name} is still zero after 3 steps: the adapters did not train")
    optim = set(f["optim"]["exp_avg"].keys())
    non_adapter = sorted(n for n in optim if ".lora_" not in n)
    if non_adapter:
        failures.append(f"optimizer state for frozen tensors: {non_adapter[:3]}")
    if not optim:
        failures.append("no optimizer state for the adapters")
    if "lora_base_root" not in f["state"]:
        failures.append("the adapter checkpoint does not name its model (/state/lora_base_root)")
print(f"adapter elements: {adapter_elems}")

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

# A missing base, and a damaged one, are refused naming train.init_from.
r = examoe([f"output.run_dir={a.workdir}/missing", f"train.init_from={a.workdir}/no_such_ckpt"] + LORA,
           expect_ok=False)
if r.returncode == 0 or "train.init_from" not in r.stdout or "does not exist" not in r.stdout:
    failures.append("a missing train.init_from was not refused by name:\n" + r.stdout[-1500:])
damaged = os.path.join(a.workdir, "damaged")
shutil.copytree(os.path.join(base, "ckpt", "step_00000003"), os.path.join(damaged, "step_00000003"))
with h5py.File(os.path.join(damaged, "step_00000003", "state.h5"), "r+") as f:
    d = f["model"]["layers.0.attn.wq.weight"]
    d[0, 0] = d[0, 0] + 1.0  # the stored checksum no longer matches
r = examoe([f"output.run_dir={a.workdir}/from_damaged", f"train.init_from={damaged}"] + LORA, expect_ok=False)
if r.returncode == 0 or "train.init_from" not in r.stdout:
    failures.append("a damaged train.init_from was not refused by name:\n" + r.stdout[-1500:])

# Merge, then evaluate both on the same tokens.
merged = os.path.join(a.workdir, "merged")
run([a.ckpt_tool, "merge-lora", f"{base}/ckpt", f"{ft}/ckpt", merged])
tokens = os.path.join(os.path.dirname(a.deck), "..", "data", "legal.txt")


def ce(ckpt):
    r = run([a.examoe, "eval", "--checkpoint", ckpt, "--tokens", tokens])
    return json.loads(r.stdout.strip().splitlines()[-1])["ce_nats_per_token"]


ce_adapters, ce_merged = ce(f"{ft}/ckpt"), ce(merged)
print(f"eval: adapters {ce_adapters:.12f}, merged {ce_merged:.12f}")
if abs(ce_merged - ce_adapters) > 1e-6 * abs(ce_adapters):
    failures.append(f"the merged model's loss {ce_merged} differs from the adapters' {ce_adapters} by more than 1e-6")
r = run([a.ckpt_tool, "merge-lora", f"{other}/ckpt", f"{ft}/ckpt", os.path.join(a.workdir, "bad")], expect_ok=False)
if r.returncode == 0 or "Merkle root" not in r.stdout:
    failures.append("merging onto another model was not refused:\n" + r.stdout[-2000:])

# The seeded model under adapters: its checkpoints hold all of it, and the
# frozen part is the same after 1 and after 3 steps.
seeded = {}
for steps in (1, 3):
    d = os.path.join(a.workdir, f"seeded{steps}")
    examoe([f"output.run_dir={d}", f"train.steps={steps}", f"checkpoint.every={steps}"] + LORA, ranks=2)
    seeded[steps] = h5py.File(os.path.join(d, "ckpt", f"step_{steps:08d}", "state.h5"), "r")
frozen = [n for n in seeded[3]["model"].keys() if ".lora_" not in n]
if not frozen:
    failures.append("the seeded LoRA checkpoint holds no frozen tensor")
for n in frozen:
    if not np.array_equal(seeded[1]["model"][n][...], seeded[3]["model"][n][...]):
        failures.append(f"{n} changed between step 1 and step 3 under LoRA")
moved = [n for n in seeded[3]["model"].keys() if ".lora_b" in n
         and not np.array_equal(seeded[1]["model"][n][...], seeded[3]["model"][n][...])]
if not moved:
    failures.append("no adapter changed between step 1 and step 3: the comparison proves nothing")
print(f"frozen tensors bitwise equal after 1 and 3 steps: {len(frozen)}; adapters that moved: {len(moved)}")

for f in failures:
    print("FAIL:", f)
sys.exit(1 if failures else 0)
