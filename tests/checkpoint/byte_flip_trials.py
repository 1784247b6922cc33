#!/usr/bin/env python3
"""Byte-flip trials of checkpoint repair (docs/architecture.md "Fault tolerance").

A base run writes its step-2 checkpoint to both storage tiers (tier 1:
checkpoint.local_dir, tier 2: checkpoint.dir). Each trial copies them, XORs
one byte at a random position of the tier-1 state.h5 with a random non-zero
value, and resumes for one step (which writes a step-3 checkpoint). Every
other trial first deletes the tier-2 copy, so that nothing can repair the
flip. A trial ends as one of:

  repaired  the flip was detected (a log line names the dataset and chunk,
            or the whole-copy fallback) and the resumed run's step-3 loss
            and step-3 checkpoint (its Merkle root over every dataset's
            checksum: parameters and both AdamW moments) equal the clean
            resume's;
  refused   the load stopped with a message naming the file (and the
            dataset, when the flip hit data);
  harmless  nothing was detected and the run's loss and state equal the
            clean resume's (the byte is one no value depends on: HDF5 free
            space or padding);
  wrong     the run went on with a loss or a state unlike the clean one;
  crashed   anything else (a signal, an error without such a message).

Exits 1 when any trial is wrong or crashed, or when a trial with a copy was
refused; prints the counts.
"""
import argparse
import json
import os
import random
import re
import shutil
import subprocess
import sys


def run(cmd, env=None):
    p = subprocess.run(cmd, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True, env=env)
    return p.returncode, p.stdout


def loss_of(metrics, step):
    with open(metrics) as f:
        for line in f:
            r = json.loads(line)
            if r.get("step") == step and "loss" in r:
                return r["loss"]
    return None


def merkle_of(ckpt_tool, step_dir):
    rc, out = run([ckpt_tool, "inspect", step_dir])
    m = re.search(r"^merkle_root\s+(\S+)", out, re.M)
    return m.group(1) if rc == 0 and m else None


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--examoe", required=True)
    ap.add_argument("--ckpt", required=True, help="examoe-ckpt")
    ap.add_argument("--deck", required=True)
    ap.add_argument("--work", required=True)
    ap.add_argument("--trials", type=int, default=10)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("args", nargs=argparse.REMAINDER, help="-- then extra examoe arguments (--set ...)")
    a = ap.parse_args()
    extra = [x for x in a.args if x != "--"]
    shutil.rmtree(a.work, ignore_errors=True)
    os.makedirs(a.work)
    common = [a.examoe, a.deck] + extra + ["--set", "train.eval_every=0", "--set", "checkpoint.every=2",
                                           "--set", "checkpoint.local_every=2", "--set", "checkpoint.keep=0"]
    base = os.path.join(a.work, "base")
    rc, out = run(common + ["--set", "train.steps=2", "--set", f"output.run_dir={base}"])
    if rc != 0:
        sys.exit(f"the base run failed ({rc}):\n{out}")
    resume = ["--set", "train.steps=3", "--set", "checkpoint.resume=true"]

    def trial_dir(name, keep_copy):
        d = os.path.join(a.work, name)
        shutil.rmtree(d, ignore_errors=True)
        shutil.copytree(base, d, symlinks=True)
        os.remove(os.path.join(d, "metrics.jsonl"))
        if not keep_copy:
            shutil.rmtree(os.path.join(d, "ckpt"))
        return d

    clean = trial_dir("clean", True)
    rc, out = run(common + resume + ["--set", f"output.run_dir={clean}"])
    if rc != 0:
        sys.exit(f"the clean resume failed ({rc}):\n{out}")
    want_loss = loss_of(os.path.join(clean, "metrics.jsonl"), 3)
    want_root = merkle_of(a.ckpt, os.path.join(clean, "ckpt", "step_00000003"))
    if want_loss is None or want_root is None:
        sys.exit("the clean resume logged no step-3 loss or wrote no step-3 checkpoint")

    rng = random.Random(a.seed)
    counts = {k: 0 for k in ("repaired", "refused", "harmless", "wrong", "crashed")}
    refused_with_copy = 0
    ways = {}
    for t in range(a.trials):
        keep_copy = t % 2 == 0
        d = trial_dir("trial", keep_copy)
        victim = os.path.join(d, "ckpt_local", "step_00000002", "state.h5")
        size = os.path.getsize(victim)
        pos, xor = rng.randrange(size), rng.randrange(1, 256)
        with open(victim, "r+b") as f:
            f.seek(pos)
            b = f.read(1)[0]
            f.seek(pos)
            f.write(bytes([b ^ xor]))
        rc, out = run(common + resume + ["--set", f"output.run_dir={d}"])
        loss = loss_of(os.path.join(d, "metrics.jsonl"), 3) if rc == 0 else None
        root = merkle_of(a.ckpt, os.path.join(d, "ckpt", "step_00000003")) if rc == 0 else None
        detected = "repaired from the copy" in out or "loading the copy" in out
        named = re.search(r"checkpoint file \S+ is (corrupt|damaged)|cannot read checkpoint file", out)
        if rc == 0 and loss == want_loss and root == want_root:
            kind = "repaired" if detected else "harmless"
        elif rc == 0:
            kind = "wrong"
        elif named and rc == 1:
            kind = "refused"
            refused_with_copy += keep_copy
        else:
            kind = "crashed"
        counts[kind] += 1
        how = ""
        if kind == "repaired":
            how = " (chunks from the copy)" if "repaired from the copy" in out else " (the whole copy)"
            ways[how] = ways.get(how, 0) + 1
        elif kind == "refused":
            how = " (names a dataset)" if re.search(r"dataset /|datasets' checksums|chunk checksums", out) else \
                " (names the file's metadata)"
            ways[how] = ways.get(how, 0) + 1
        where = "with copy" if keep_copy else "no copy"
        print(f"trial {t:3d}: byte {pos:7d} of {size} ^= 0x{xor:02x} ({where}): {kind}{how}", flush=True)
        if kind in ("wrong", "crashed") or (kind == "refused" and keep_copy):
            tail = "\n".join(out.splitlines()[-15:])
            print(f"  exit {rc}, loss {loss} (clean {want_loss}), merkle {root} (clean {want_root}):\n{tail}")
    print("byte-flip trials: " + ", ".join(f"{k} {v}" for k, v in counts.items()) +
          f" (of {a.trials}; refused although a copy existed: {refused_with_copy}); " +
          ", ".join(f"{v}{k}" for k, v in sorted(ways.items())))
    sys.exit(1 if counts["wrong"] or counts["crashed"] or refused_with_copy else 0)


if __name__ == "__main__":
    main()
