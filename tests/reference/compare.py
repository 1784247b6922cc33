#!/usr/bin/python3
"""compare.py: ExaMoE (refdump) against the PyTorch reference, tensor by tensor.

  compare.py --workdir DIR [--refdump EXE --deck DECK [--set k=v]... [--adamw-steps N]]
             [--tol 1e-4] [--expect-drops] [--no-float64]

With --refdump, first runs `EXE DECK --set ... --out DIR` (ExaMoE's model at
init, a batch, its forward/backward and AdamW steps: see refdump.cpp); else
DIR must already hold refdump's files (cfg.json, batch.h5, out.h5,
weights_path.txt). Then runs the reference (run_reference.py's main, in this
process) on the same config, weights and batch in float32 (ref32.h5) and, for
information, float64 (ref64.h5), and compares every tensor of the
reference's output with ExaMoE's: logits, loss/ce/aux/z, every parameter
gradient, the AdamW losses and final weights, and the routing counts.

Metric, per tensor:   err = max|a - b| / max(max|b|, tiny)
(a = ExaMoE, b = reference; for a scalar, |a - b| / |b|). This is the
infinity-norm relative error of the tensor, i.e. the error measured on the
tensor's own scale. An elementwise relative error is not usable: gradient
entries that are sums of many terms can be near zero by cancellation and
carry an absolute error proportional to their summands, not to themselves,
so |a_i - b_i|/|b_i| is arbitrarily large for a correct implementation;
normalising by max|b| measures every element's error against the size of
the tensor it belongs to (stricter than a norm-wise ||a-b||/||b||, since it
is the worst element). A tensor that is exactly zero in the reference (an
expert no token reached, embedding rows of absent tokens) must be exactly
zero in ExaMoE too (tiny = 1e-30). The design's "1e-4 relative" is the
threshold (--tol) on ExaMoE vs the float32 reference; ExaMoE vs float64 and
float32 vs float64 are printed for information (they show which side of a
disagreement is closer to exact arithmetic). Routing counts must be equal.

Exit status: 0 agree, 1 disagree (or refdump failed), 77 the interpreter
lacks torch or h5py (the ctest SKIP_RETURN_CODE)."""

import argparse
import json
import os
import subprocess
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
TINY = 1e-30


def parse_args(argv):
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--workdir", required=True)
    ap.add_argument("--refdump", help="refdump executable: run it first")
    ap.add_argument("--deck", help="deck for refdump")
    ap.add_argument("--set", action="append", default=[], dest="sets", metavar="K=V", help="deck override (repeatable)")
    ap.add_argument("--adamw-steps", type=int, default=10)
    ap.add_argument("--batch-seed", type=int, default=None)
    ap.add_argument("--tol", type=float, default=1e-4)
    ap.add_argument("--expect-drops", action="store_true", help="fail unless capacity drops assignments")
    ap.add_argument("--no-float64", action="store_true", help="skip the float64 reference run")
    ap.add_argument("--threads", type=int, default=1)
    return ap.parse_args(argv)


def run_refdump(a):
    if not a.deck:
        raise SystemExit("compare.py: --refdump needs --deck")
    cmd = [a.refdump, a.deck, "--out", a.workdir, "--adamw-steps", str(a.adamw_steps)]
    for s in a.sets:
        cmd += ["--set", s]
    if a.batch_seed is not None:
        cmd += ["--batch-seed", str(a.batch_seed)]
    print("compare.py: $ " + " ".join(cmd), flush=True)
    r = subprocess.run(cmd)
    if r.returncode != 0:
        print(f"compare.py: refdump failed (exit {r.returncode})", file=sys.stderr)
        sys.exit(1)


def run_reference(a, weights, dtype, out):
    sys.path.insert(0, HERE)
    from examoe_ref.cli import main as ref_main
    argv = ["--config", os.path.join(a.workdir, "cfg.json"), "--weights", weights,
            "--batch", os.path.join(a.workdir, "batch.h5"), "--out", out, "--dtype", dtype,
            "--threads", str(a.threads)]
    if a.adamw_steps > 0:
        argv += ["--adamw-steps", str(a.adamw_steps)]
    rc = ref_main(argv)
    if rc:
        raise SystemExit(f"compare.py: the reference failed ({dtype})")


def read_all(path):
    import h5py
    import numpy as np
    out = {}
    with h5py.File(path, "r") as f:
        f.visititems(lambda n, o: out.__setitem__(n, np.asarray(o[()])) if isinstance(o, h5py.Dataset) else None)
    return out


def rel_err(a, b):
    import numpy as np
    a = np.asarray(a, dtype=np.float64)
    b = np.asarray(b, dtype=np.float64)
    if a.shape != b.shape:
        return float("inf")
    if a.size == 0:
        return 0.0
    d = np.max(np.abs(a - b))
    if not np.isfinite(d):
        return float("inf")
    return float(d / max(np.max(np.abs(b)), TINY))


def group_of(name):
    if name in ("loss", "ce", "aux", "z"):
        return name
    if name.startswith("grads/"):
        rest = name[len("grads/"):]
    elif name.startswith("adamw/final/"):
        rest = name[len("adamw/final/"):]
    else:
        return name
    head = name[: len(name) - len(rest)]
    # Group parameters by kind: grads/attn.wq, grads/moe.experts.w1, ...
    parts = rest.split(".")
    if parts[0] == "layers":
        kind = ".".join(parts[2:])
        kind = kind[: -len(".weight")] if kind.endswith(".weight") else kind
    else:
        kind = parts[0]
    return head + kind


def main(argv=None):
    a = parse_args(sys.argv[1:] if argv is None else argv)
    try:
        import h5py  # noqa: F401
        import numpy as np
        import torch  # noqa: F401
    except ImportError as e:
        print(f"compare.py: SKIP: {sys.executable} lacks torch/h5py ({e}); Debian: python3-torch python3-h5py")
        return 77

    if a.refdump:
        run_refdump(a)
    wd = a.workdir
    with open(os.path.join(wd, "weights_path.txt")) as f:
        weights = f.read().strip()
    run_reference(a, weights, "float32", os.path.join(wd, "ref32.h5"))
    if not a.no_float64:
        run_reference(a, weights, "float64", os.path.join(wd, "ref64.h5"))

    ours = read_all(os.path.join(wd, "out.h5"))
    r32 = read_all(os.path.join(wd, "ref32.h5"))
    r64 = None if a.no_float64 else read_all(os.path.join(wd, "ref64.h5"))
    init = read_all(weights)

    problems = []
    # Routing counts: equal on both sides (a different count means a different
    # top-k or capacity decision, and then nothing downstream can agree).
    stat_names = sorted(n for n in r32 if n.startswith("stats/"))
    routed = kept = 0
    for n in stat_names:
        if n not in ours:
            problems.append(f"{n}: missing from ExaMoE's out.h5")
            continue
        if not np.array_equal(np.asarray(ours[n]).astype(np.int64), np.asarray(r32[n]).astype(np.int64)):
            problems.append(f"{n}: ExaMoE {ours[n].tolist()} != reference {r32[n].tolist()} (routing differs)")
        if n.endswith("/routed"):
            routed += int(np.sum(r32[n]))
        else:
            kept += int(np.sum(r32[n]))
    dropped = routed - kept
    if a.expect_drops and dropped <= 0:
        problems.append("--expect-drops: no assignment was dropped by capacity (raise the imbalance or lower "
                        "moe.capacity_factor)")

    # Tensors.
    rows = []  # (group, name, err32, err64, err_ref)
    for n in sorted(r32):
        if n.startswith("stats/"):
            continue
        if n not in ours:
            problems.append(f"{n}: missing from ExaMoE's out.h5")
            continue
        e32 = rel_err(ours[n], r32[n])
        e64 = rel_err(ours[n], r64[n]) if r64 is not None else float("nan")
        eref = rel_err(r32[n], r64[n]) if r64 is not None else float("nan")
        rows.append((group_of(n), n, e32, e64, eref))
        if not e32 <= a.tol:
            problems.append(f"{n}: relative error {e32:.3e} > {a.tol:g}")
    extra = sorted(n for n in ours if n not in r32)
    if extra:
        problems.append(f"ExaMoE's out.h5 has datasets the reference lacks: {extra}")

    # Worst tensor per group.
    def badness(r):  # NaN counts as worst
        return float("inf") if r[2] != r[2] else r[2]

    groups = {}
    for r in rows:
        cnt, worst = groups.get(r[0], (0, None))
        groups[r[0]] = (cnt + 1, r if worst is None or badness(r) > badness(worst) else worst)

    def order(g):
        for i, p in enumerate(("logits", "loss", "ce", "aux", "z", "grads/", "adamw/losses", "adamw/final/")):
            if g.startswith(p):
                return (i, g)
        return (99, g)

    cfg = json.load(open(os.path.join(wd, "cfg.json")))
    m, moe = cfg.get("model", {}), cfg.get("moe", {})
    title = (f"{os.path.basename(os.path.normpath(wd))}: d={m.get('d_model')} L={m.get('n_layers')} "
             f"H={m.get('n_heads')}/{m.get('n_kv_heads')} T={m.get('seq_len')} "
             f"B={cfg.get('train', {}).get('micro_batch')} E={moe.get('n_experts')} k={moe.get('top_k')} "
             f"S={moe.get('n_shared_experts')} cap={moe.get('capacity_factor')} moe_every={moe.get('moe_every')} "
             f"tied={m.get('tie_embeddings')} norm_topk={moe.get('norm_topk')}")
    lines = [title,
             f"routing: {routed} assignments, {dropped} dropped by capacity",
             f"{'group':<26} {'n':>3}  {'worst tensor':<34} {'ExaMoE-ref32':>12} {'ExaMoE-ref64':>12} {'ref32-ref64':>12}"]
    for g in sorted(groups, key=order):
        cnt, (_, n, e32, e64, eref) = groups[g]
        short = n.split("/")[-1]
        lines.append(f"{g:<26} {cnt:>3}  {short:<34} {e32:12.3e} {e64:12.3e} {eref:12.3e}")
    if rows:
        w = max(rows, key=badness)
        lines.append(f"worst overall: {w[1]} {w[2]:.3e} (tolerance {a.tol:g}, metric max|a-b|/max|b| per tensor)")
    # Information: the final weights' error on the scale of their AdamW update.
    upd = []
    for n in ours:
        if n.startswith("adamw/final/"):
            p = n[len("adamw/final/"):]
            key = "model/" + p
            if key in init and n in r32:
                step = np.max(np.abs(r32[n].astype(np.float64) - init[key].astype(np.float64)))
                if step > 0:
                    upd.append((float(np.max(np.abs(ours[n].astype(np.float64) - r32[n].astype(np.float64))) / step), p))
    if upd:
        u = max(upd)
        lines.append(f"info: worst adamw/final error relative to its update max|w_N - w_0|: {u[0]:.3e} ({u[1]})")
    report = "\n".join(lines)
    print(report)
    with open(os.path.join(wd, "report.txt"), "w") as f:
        f.write(report + "\n")
        for p in problems:
            f.write("PROBLEM: " + p + "\n")
    if problems:
        for p in problems:
            print("compare.py: FAIL: " + p, file=sys.stderr)
        return 1
    print(f"compare.py: PASS ({len(rows)} tensors, {len(stat_names)} routing counts)")
    return 0


if __name__ == "__main__":
    sys.exit(main())
