#!/usr/bin/env python3
"""Layout fuzzer: random model shapes under random parallel layouts, each
checked against the single-rank losses of the same shape.

  scripts/layout_fuzz.py [--cases N] [--seed S] [--case I] [--max-ranks R]
                         [--steps K] [--work DIR] [--examoe PATH] [--mpiexec CMD]

Case i of seed S draws, from random.Random(f"{S}:{i}"), a model (d_model,
layers, heads with GQA, tied or not, dense/MoE mix, shared experts, top-1/2,
dropless or capacity 1.0 (over the sequence under cp), bf16 products where
the build has them, expert growth after every step) and a layout over dp,
zero 0-3, ep, tp (with or without sequence parallelism), cp (ring or a2a),
pp (gpipe, 1f1b, zb, interleaved), etp (1, or blocks of half of tp = 4),
hierarchical collectives on pretend nodes,
full activation recomputation, top-k gradient compression at ratio 1
(exact: every value sent) and AdamW's second moment frozen after the first
update (with eps 1e-4, so that a first gradient that is rounding noise does
not scale the next steps), on at most R ranks (default 8). `examoe
--check` decides whether the deck accepts the layout: a refused one is
counted as refused, not run. An accepted one trains K steps (default 3) and
must give the single-rank run's loss at every step to 1e-5 relative
(BF16_TOL under bf16); the global batch (8 sequences of 32 tokens) and
micro-batch (2) are the same in both. A failure prints the seed, the case
and the command that reruns it alone (--seed S --case i).

Capacity limits under context parallelism come with moe.capacity_scope =
"sequence" (the default, "micro_batch", drops over each cp rank's own rows,
so its losses differ from one rank by design). Exit 0 when no accepted case failed, 1
otherwise. It reports; it never times anything.
"""
import argparse
import json
import os
import random
import shutil
import subprocess
import sys
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


# A layout sums in another order than one rank; under bf16 products an
# fp32-ulp difference can move an input across a bf16 rounding boundary,
# one bf16 ulp (2^-8 relative) for that element: the bf16 layout tests
# (tests/train/CMakeLists.txt) measured <= 8.7e-5 over 5 steps.
BF16_TOL = 1e-3


def draw(rng, max_ranks, bf16=False):
    """(model keys, layout keys, ranks) of one case."""
    d = rng.choice([32, 64])
    heads = rng.choice([2, 4])
    kv = rng.choice([h for h in (1, 2, 4) if heads % h == 0 and h <= heads])
    layers = rng.choice([2, 4])
    experts = rng.choice([4, 8])
    model = {
        "model.d_model": d, "model.n_layers": layers, "model.n_heads": heads, "model.n_kv_heads": kv,
        "model.seq_len": 32, "model.tie_embeddings": rng.random() < 0.3,
        "moe.n_experts": experts, "moe.top_k": rng.choice([1, 2]), "moe.d_expert": 32,
        "moe.moe_every": rng.choice([1, 2]), "moe.n_shared_experts": rng.choice([0, 0, 1]),
    }
    while True:
        tp, cp, pp, dp = (rng.choice([1, 1, 2]) for _ in range(4))
        if tp * cp * pp * dp <= max_ranks:
            break
    ranks = tp * cp * pp * dp
    eps = [e for e in (1, 2, 4) if (dp * cp) % e == 0 and experts % e == 0]
    layout = {"parallel.tp": tp, "parallel.cp": cp, "parallel.pp": pp, "parallel.dp": dp,
              "parallel.ep": rng.choice(eps), "parallel.zero": rng.choice([0, 1, 2, 3]),
              "train.grad_accum": 4 // dp}
    if tp > 1:
        layout["parallel.sequence_parallel"] = rng.random() < 0.5
    if cp > 1:
        layout["parallel.cp_mode"] = rng.choice(["ring", "a2a"])
        layout["moe.aux_scope"] = "sequence"  # the aux loss over the whole sequence, as one rank has it
        if rng.random() < 0.3:  # capacity and drops over the whole sequences, as one rank has them
            model["moe.capacity_factor"] = 1.0
            layout["moe.capacity_scope"] = "sequence"
    elif rng.random() < 0.3:
        model["moe.capacity_factor"] = 1.0
    if pp > 1:
        sched = rng.choice(["gpipe", "1f1b", "zb", "interleaved"])
        layout["pipeline.schedule"] = sched
        if sched == "interleaved":
            layout["pipeline.virtual_stages"] = 2
    if dp > 1 and rng.random() < 0.25:
        layout["parallel.hierarchical"] = True
        layout["parallel.ranks_per_node"] = rng.choice([r for r in (1, 2) if ranks % r == 0])
    # Activation recomputation, full or selective: the same losses as the
    # reference, which stores its activations. One draw for both, so other
    # draws keep their cases.
    r = rng.random()
    if r < 0.3:
        layout["memory.recompute"] = "full"
    elif r < 0.5:
        layout["memory.recompute"] = "selective"
    # bf16 products, in the reference run too (a model key), where the
    # build has them; their tolerance is BF16_TOL.
    if bf16 and rng.random() < 0.25:
        model["precision.compute"] = "bf16"
    # Expert growth after every step (+4 experts: every ep divides it),
    # in the reference run too.
    if rng.random() < 0.25:
        model.update({"growth.every": 1, "growth.add": 4, "growth.max_experts": experts + 8, "growth.noise": 0.01})
    # Packed documents (data.documents): every attention path masks them
    # and the loss is the step's token mean, in the reference run too.
    # ... or token-budget micro-batches of whole documents (train.batch_tokens).
    r = rng.random()
    if r < 0.3:
        model["data.documents"] = "packed"
    elif r < 0.45:
        model["train.batch_tokens"] = 2 * model["model.seq_len"]
    # LSH attention (with cp only in the a2a mode, the deck refuses the
    # ring), its chunks a quarter of the sequence, in the reference run too.
    if (cp == 1 or layout.get("parallel.cp_mode") == "a2a") and rng.random() < 0.2:
        model.update({"attention.kind": "lsh", "attention.lsh_bucket": model["model.seq_len"] // 4,
                      "attention.lsh_local": rng.random() < 0.5})
    # Top-k gradient compression at ratio 1 (every value sent, nothing
    # owed: the uncompressed sums in rank order) through every layout's
    # reductions and residual buffers; on the inter-node
    # hop only under hierarchical collectives, and through growth events.
    if dp * cp > 1 and rng.random() < 0.25:
        layout.update({"comm.compression": "topk", "comm.topk_ratio": 1.0})
        if layout.get("parallel.hierarchical"):
            layout["comm.compress_scope"] = "inter_node"
    # The expert all-to-all in parts (moe.a2a_chunks), on the flat path.
    if layout.get("parallel.ep", 1) > 1 and rng.random() < 0.3:
        layout["moe.a2a_chunks"] = rng.choice([2, 3, 8])
        layout["comm.hierarchical_a2a"] = False
    # Expert offload (the same arithmetic: the reference's losses), its
    # optimizer state too in half the cases, under any ZeRO stage.
    if rng.random() < 0.25:
        layout.update({"memory.offload_experts": True, "memory.offload_prefetch": rng.choice([1, 2])})
        if rng.random() < 0.5:
            layout["memory.offload_optimizer"] = True
    # Expert tensor parallelism (drawn after the others, so that the draws
    # above keep their cases): whole experts, or tp doubled where the ranks allow, its
    # experts split over blocks of half the tp ranks (1 < etp < tp).
    if tp > 1:
        r = rng.random()
        if r < 0.25:
            layout["parallel.etp"] = 1
        elif r < 0.5 and 2 * ranks <= max_ranks:
            layout["parallel.tp"] = 2 * tp
            layout["parallel.etp"] = tp
            ranks *= 2
    # AdamW's second moment frozen after the first update (1-bit Adam's
    # recipe for top-k), in the reference run too: every layout's optimizer
    # shards keep it alike. One step's second moment divides the next
    # gradients by the first one's size, which for an element whose first
    # gradient is rounding noise turns the layouts' rounding into the
    # update; an eps above that noise keeps the comparison to 1e-5 fair.
    if rng.random() < 0.2:
        model.update({"optim.freeze_variance_step": 1, "optim.eps": 1e-4})
    return model, layout, ranks


def sets(keys):
    out = []
    for k, v in keys.items():
        out += ["--set", f"{k}={str(v).lower() if isinstance(v, bool) else v}"]
    return out


def losses(run_dir):
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        return [r["loss"] for r in map(json.loads, f) if "loss" in r and "event" not in r]


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--cases", type=int, default=20)
    ap.add_argument("--seed", type=int, default=None, help="default: the time (printed)")
    ap.add_argument("--case", type=int, default=None, help="run this case of --seed alone")
    ap.add_argument("--max-ranks", type=int, default=8)
    ap.add_argument("--steps", type=int, default=3)
    ap.add_argument("--work", default=None, help="default: a temporary directory, removed")
    ap.add_argument("--examoe", default=os.environ.get("EXAMOE", os.path.join(ROOT, "build/bin/examoe")))
    ap.add_argument("--mpiexec", default=os.environ.get("MPIEXEC", "mpiexec"))
    a = ap.parse_args()
    seed = a.seed if a.seed is not None else int(time.time())
    work = a.work or os.path.join("/tmp", f"exa_layout_fuzz_{os.getpid()}")
    os.makedirs(work, exist_ok=True)
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    base = [os.path.join(ROOT, "input/tiny.toml"), "--set", f"train.steps={a.steps}", "--set", "train.micro_batch=2",
            "--set", "train.log_every=1", "--set", "train.eval_every=0", "--set", "checkpoint.every=0",
            "--set", "optim.warmup_steps=1"]
    cases = [a.case] if a.case is not None else range(a.cases)
    # Whether this build multiplies in bf16 (examoe --version says).
    version = subprocess.run([a.examoe, "--version"], capture_output=True, text=True, env=env).stdout
    bf16 = "bf16/fp16 products: oneDNN" in version
    print(f"layout_fuzz: seed {seed}, {len(cases)} case(s), at most {a.max_ranks} ranks "
          f"(rerun one: scripts/layout_fuzz.py --seed {seed} --case I)", flush=True)
    refs, ran, refused, failed = {}, 0, 0, []
    for i in cases:
        model, layout, ranks = draw(random.Random(f"{seed}:{i}"), a.max_ranks, bf16)
        desc = " ".join(f"{k.split('.')[1]}={v}" for k, v in {**layout, **model}.items())
        check = subprocess.run([a.examoe, *base, *sets(model), *sets(layout), "--check", "--ranks", str(ranks)],
                               capture_output=True, text=True, env=env)
        if check.returncode != 0:
            why = (check.stderr.strip().splitlines() or ["?"])[-1][:160]
            print(f"  case {i}: refused ({ranks} ranks): {why}", flush=True)
            refused += 1
            continue
        key = json.dumps(model, sort_keys=True)
        if key not in refs:
            ref_dir = os.path.join(work, f"ref{len(refs)}")
            shutil.rmtree(ref_dir, ignore_errors=True)
            subprocess.run([a.examoe, *base, *sets(model), "--set", "train.grad_accum=4", "--set",
                            f"output.run_dir={ref_dir}"], check=True, capture_output=True, env=env)
            refs[key] = losses(ref_dir)
        run_dir = os.path.join(work, f"case{i}")
        shutil.rmtree(run_dir, ignore_errors=True)
        cmd = [*a.mpiexec.split(), "-n", str(ranks), a.examoe, *base, *sets(model), *sets(layout),
               "--set", f"output.run_dir={run_dir}"]
        r = subprocess.run(cmd, capture_output=True, text=True, env=env)
        ran += 1
        ref = refs[key]
        got = losses(run_dir) if r.returncode == 0 else []
        worst = max((abs(x - y) / abs(y) for x, y in zip(got, ref)), default=float("inf"))
        tol = BF16_TOL if model.get("precision.compute") == "bf16" else 1e-5
        ok = r.returncode == 0 and len(got) == len(ref) and worst <= tol
        print(f"  case {i}: {'ok  ' if ok else 'FAIL'} {ranks} ranks, worst {worst:.1e}: {desc}", flush=True)
        if not ok:
            failed.append(i)
            tail = "\n".join((r.stderr or r.stdout).strip().splitlines()[-5:])
            print(f"    rerun: scripts/layout_fuzz.py --seed {seed} --case {i}\n    {tail}", flush=True)
    print(f"layout_fuzz: seed {seed}: {ran} ran, {len(failed)} failed, {refused} refused by the deck", flush=True)
    if a.work is None:
        shutil.rmtree(work, ignore_errors=True)
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
