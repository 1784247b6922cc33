"""The planner against measured steps (docs/planner.md, "Validation").

Runs each layout of LAYOUTS on input/bench.toml (micro-batch 4, two per
step) for a few steps, asks `examoe-plan --predict --json` for the same
deck and ranks, and writes a Markdown table, a JSON file and a plot:
predicted against measured step time and rank 0's memory (parameters,
gradients, optimizer and activations as the memory ledger counts them).
First the cluster's matmul efficiencies are fitted to the day's one-rank
runs (fit_cluster), unless --no-fit.

    plan_validate.py --examoe B --plan B --mpiexec M --cluster C --work DIR --out PREFIX [--only NAME ...]
                     [--no-fit] [--reuse]
"""
import argparse
import json
import os
import re
import statistics
import subprocess
import sys

ROOT = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
DECK = os.path.join(ROOT, "input", "bench.toml")
BASE = ["--set", "train.micro_batch=4", "--set", "train.grad_accum=2", "--set", "train.log_every=1",
        "--set", "output.metrics_every=1", "--set", "train.eval_every=0", "--set", "checkpoint.every=0"]

# name, ranks, settings
LAYOUTS = [
    ("one", 1, ""),
    ("one_bf16", 1, "precision.compute=bf16"),
    ("one_recompute", 1, "memory.recompute=full"),
    ("one_recompute_sqrt", 1, "memory.recompute=full memory.checkpoint_layers=sqrt"),
    ("one_mb8", 1, "train.micro_batch=8 train.grad_accum=1"),
    ("one_bf16_recompute", 1, "precision.compute=bf16 memory.recompute=full"),
    ("dp2", 2, ""),
    ("dp2_zero1", 2, "parallel.zero=1"),
    ("dp2_zero2", 2, "parallel.zero=2"),
    ("dp2_zero3", 2, "parallel.zero=3"),
    ("dp2_zero1_bf16grads", 2, "parallel.zero=1 comm.compression=bf16"),
    ("dp2_int8grads", 2, "comm.compression=int8"),
    ("dp2_bf16", 2, "precision.compute=bf16"),
    ("ep2", 2, "parallel.ep=2"),
    ("ep2_zero1_a2a_bf16", 2, "parallel.ep=2 parallel.zero=1 comm.a2a_compression=bf16"),
    ("tp2", 2, "parallel.tp=2"),
    ("tp2_sp", 2, "parallel.tp=2 parallel.sequence_parallel=true"),
    ("tp2_etp1", 2, "parallel.tp=2 parallel.etp=1"),
    ("pp2_1f1b", 2, "parallel.pp=2"),
    ("pp2_gpipe", 2, "parallel.pp=2 pipeline.schedule=gpipe"),
    ("pp2_zb", 2, "parallel.pp=2 pipeline.schedule=zb"),
    ("pp2_interleaved", 2, "parallel.pp=2 pipeline.schedule=interleaved pipeline.virtual_stages=2"),
    ("cp2_ring", 2, "parallel.cp=2"),
    ("cp2_a2a", 2, "parallel.cp=2 parallel.cp_mode=a2a"),
    # Gradient projection needs tasks: the deck with two data streams
    # (and the same without it, for the streams' own step time).
    ("one_streams", 1, "", "streams"),
    ("one_pcgrad", 1, "train.grad_projection=pcgrad", "streams"),
    ("dp2_zero1_pcgrad", 2, "parallel.zero=1 train.grad_projection=pcgrad", "streams"),
]

# bench.toml with two equally weighted streams (tasks) of the bundled corpora.
STREAMS = """
[[data.streams]]
path = "{root}/data/corpus.txt"
weight = 1.0
task = "prose"

[[data.streams]]
path = "{root}/data/legal.txt"
weight = 1.0
task = "legal"
"""


def deck_for(args, variant):
    if not variant:
        return DECK
    path = os.path.join(args.work, f"bench_{variant}.toml")
    with open(DECK) as f, open(path, "w") as out:
        out.write(f.read() + STREAMS.format(root=ROOT))
    return path

MEM = ("parameters", "gradients", "optimizer", "activations")


def sets(text):
    out = []
    for kv in text.split():
        out += ["--set", kv]
    return out


def measure(args, name, ranks, extra, deck):
    run_dir = os.path.join(args.work, name)
    if not (args.reuse and os.path.exists(os.path.join(run_dir, "metrics.jsonl"))):
        run(args, run_dir, ranks, extra, name, deck)
    return read_run(run_dir)


def run(args, run_dir, ranks, extra, name, deck):
    subprocess.run(["rm", "-rf", run_dir], check=True)
    cmd = [args.mpiexec, "-n", str(ranks), args.examoe, deck] + BASE + sets(extra) + [
        "--set", f"train.steps={args.steps}", "--set", f"output.run_dir={run_dir}"]
    env = dict(os.environ, OMP_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1")
    r = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"{name}: the run failed ({r.returncode}):\n{r.stdout[-2000:]}{r.stderr[-2000:]}")


def read_run(run_dir):
    steps, mem, before, imbalance = [], 0.0, 0, []
    with open(os.path.join(run_dir, "metrics.jsonl")) as f:
        for line in f:
            rec = json.loads(line)
            if "tokens_per_s" not in rec or not rec.get("tokens"):
                continue
            # "tokens" counts the run so far, "tokens_per_s" the interval.
            tokens, before = rec["tokens"] - before, rec["tokens"]
            if rec["step"] >= 2:  # step 1 warms up (first touch, BLAS buffers)
                steps.append(tokens / rec["tokens_per_s"])
                if rec.get("expert_imbalance"):
                    imbalance.append(rec["expert_imbalance"])
            if "mem" in rec:
                mem = max(mem, sum(rec["mem"][c]["peak"] for c in MEM))
    return statistics.median(steps), mem, statistics.median(imbalance) if imbalance else 1.0


# Each efficiency the day's fit takes, and the one-rank layout it is fitted to.
FIT_LAYOUT = {"matmul_efficiency": "one", "low_precision_efficiency": "one_bf16"}


def set_keys(text, values):
    for key, value in values.items():
        text, n = re.subn(rf"(?m)^{key} = .*$", f"{key} = {value:.6g}", text)
        if n != 1:
            sys.exit(f"cluster file: expected one '{key} = ' line, found {n}")
    return text


def fit_cluster(args, measured):
    """The cluster file's two matmul efficiencies fitted again to the day's
    one-rank runs `one` (fp32) and `one_bf16` (a step is a + b /
    efficiency: two predictions give a and b). This VM's speed drifts from
    day to day, its bf16 products' most (docs/planner.md, "Validation");
    the rates, attention_efficiency and elementwise_passes stay the
    file's. Every other layout is held out."""
    with open(args.cluster) as f:
        text = f.read()
    fitted = os.path.join(args.work, "fitted.toml")
    fits = {}
    for key, name in FIT_LAYOUT.items():
        if name not in measured:
            continue
        t, _, imb, deck, ranks, extra = measured[name]
        steps = []
        for e in (1.0, 0.5):
            with open(fitted, "w") as f:
                f.write(set_keys(text, {key: e}))
            steps.append(predict(args, ranks, extra, imb, deck, fitted)[0])
        b = (steps[1] - steps[0]) / (2.0 - 1.0)  # step(e) = a + b / e
        a = steps[0] - b
        e = b / (t - a) if t > a and b > 0 else 1.0
        fits[key] = min(1.0, max(0.01, e))
        text = set_keys(text, {key: fits[key]})
    with open(fitted, "w") as f:
        f.write(f"# scripts/plan-validate.sh: {args.cluster} with its efficiencies fitted to "
                + ", ".join(FIT_LAYOUT[k] for k in fits) + "\n" + text)
    return fitted, fits


def predict(args, ranks, extra, imbalance, deck, cluster=None):
    # The routing's imbalance is the workload's, not the layout's: the
    # planner is told the run's own (metrics.jsonl expert_imbalance).
    cmd = [args.plan, deck] + BASE + sets(extra) + ["--cluster", cluster or args.cluster, "--ranks", str(ranks),
                                                     "--predict", "--json", "--expert-imbalance",
                                                     str(max(1.0, imbalance))]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"examoe-plan failed: {r.stdout}{r.stderr}")
    j = json.loads(r.stdout)
    mem = sum(j["stage_memory"][0][c] for c in MEM)
    return j["step_s"], mem, j["bound"]


def main():
    ap = argparse.ArgumentParser()
    for a in ("--examoe", "--plan", "--mpiexec", "--cluster", "--work", "--out"):
        ap.add_argument(a, required=True)
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--only", nargs="*")
    ap.add_argument("--reuse", action="store_true", help="take the runs already in --work, predict again")
    ap.add_argument("--python-plot", default="/usr/bin/python3")
    ap.add_argument("--no-fit", action="store_true",
                    help="predict with --cluster as it is, without fitting its efficiencies to the day's one-rank runs")
    args = ap.parse_args()
    os.makedirs(args.work, exist_ok=True)
    measured = {}

    def run_layout(name, ranks, extra, variant):
        if name not in measured:
            deck = deck_for(args, variant[0] if variant else None)
            measured[name] = measure(args, name, ranks, extra, deck) + (deck, ranks, extra)
        return measured[name]

    fits, reference = {}, args.cluster
    if not args.no_fit:
        for name, ranks, extra, *variant in LAYOUTS:
            if name in FIT_LAYOUT.values():
                run_layout(name, ranks, extra, variant)
        args.cluster, fits = fit_cluster(args, measured)
        print(f"cluster: {args.cluster} (fitted: " + ", ".join(f"{k} = {v:.3f}" for k, v in fits.items()) + ")",
              flush=True)
    rows = []
    for name, ranks, extra, *variant in LAYOUTS:
        if args.only and name not in args.only:
            continue
        t, m, imb, deck, _, _ = run_layout(name, ranks, extra, variant)
        pt, pm, bound = predict(args, ranks, extra, imb, deck)
        settings = (extra or "(bench.toml)") + (" (two streams)" if variant else "")
        rows.append(dict(name=name, ranks=ranks, settings=settings, measured_s=t, predicted_s=pt,
                         time_err=(pt - t) / t, imbalance=imb, measured_mem=m, predicted_mem=pm, mem_err=(pm - m) / m, bound=bound))
        r = rows[-1]
        print(f"{name:22s} {ranks}  measured {t:7.3f} s  predicted {pt:7.3f} s  ({100 * r['time_err']:+5.1f}%)   "
              f"memory {m / 2**20:7.1f} / {pm / 2**20:7.1f} MiB ({100 * r['mem_err']:+5.1f}%)", flush=True)
    errs = sorted(abs(r["time_err"]) for r in rows)
    merrs = sorted(abs(r["mem_err"]) for r in rows)
    summary = dict(layouts=len(rows), median_time_err=statistics.median(errs), worst_time_err=errs[-1],
                   median_mem_err=statistics.median(merrs), worst_mem_err=merrs[-1], cluster=os.path.relpath(reference, ROOT),
                   fitted=fits)
    held = sorted(abs(r["time_err"]) for r in rows if r["name"] not in {FIT_LAYOUT[k] for k in fits})
    if held:
        summary.update(held_out=len(held), held_out_median_time_err=statistics.median(held),
                       held_out_worst_time_err=held[-1])
    for ranks in sorted({r["ranks"] for r in rows}):
        group = [r for r in rows if r["ranks"] == ranks]
        fastest = min(group, key=lambda r: r["measured_s"])
        chosen = min(group, key=lambda r: r["predicted_s"])
        summary[f"ranking_{ranks}"] = dict(fastest=fastest["name"], chosen=chosen["name"],
                                           chosen_over_fastest=chosen["measured_s"] / fastest["measured_s"] - 1)
    print(json.dumps(summary, indent=1))
    with open(args.out + ".json", "w") as f:
        json.dump(dict(rows=rows, summary=summary), f, indent=1)
    with open(args.out + ".md", "w") as f:
        if fits:
            f.write("Cluster: `{}` with ".format(os.path.relpath(reference, ROOT)) +
                    ", ".join(f"`{k} = {v:.3f}`" for k, v in fits.items()) +
                    " fitted to `" + "`, `".join(FIT_LAYOUT[k] for k in fits) + "`; every other layout held out.\n\n")
        f.write("| layout | ranks | settings | measured s | predicted s | error | memory MiB measured | predicted | error | bound |\n")
        f.write("|---|---|---|---|---|---|---|---|---|---|\n")
        for r in rows:
            f.write(f"| {r['name']} | {r['ranks']} | `{r['settings']}` | {r['measured_s']:.3f} | {r['predicted_s']:.3f} | "
                    f"{100 * r['time_err']:+.1f}% | {r['measured_mem'] / 2**20:.1f} | {r['predicted_mem'] / 2**20:.1f} | "
                    f"{100 * r['mem_err']:+.1f}% | {r['bound']} |\n")
    plot = f"""
import json, matplotlib
matplotlib.use("Agg")
import matplotlib.pyplot as plt
d = json.load(open({args.out + '.json'!r}))["rows"]
fig, ax = plt.subplots(1, 2, figsize=(11, 4.5))
for a, m, p, unit, scale in ((ax[0], "measured_s", "predicted_s", "s", 1), (ax[1], "measured_mem", "predicted_mem", "MiB", 2**20)):
    xs = [r[m] / scale for r in d]; ys = [r[p] / scale for r in d]
    lo, hi = min(xs + ys) * 0.8, max(xs + ys) * 1.2
    a.plot([lo, hi], [lo, hi], "k-", lw=0.8); a.plot([lo, hi], [lo * 1.15, hi * 1.15], "k:", lw=0.6); a.plot([lo, hi], [lo / 1.15, hi / 1.15], "k:", lw=0.6)
    for r, x, y in zip(d, xs, ys):
        a.plot(x, y, "o", color="C0" if r["ranks"] == 1 else "C1"); a.annotate(r["name"], (x, y), fontsize=6)
    a.set_xlabel("measured " + unit); a.set_ylabel("predicted " + unit); a.set_xscale("log"); a.set_yscale("log")
ax[0].set_title("step time (dotted: 15%)"); ax[1].set_title("rank 0 memory (params+grads+optim+activations)")
fig.tight_layout(); fig.savefig({args.out + '.png'!r}, dpi=110)
"""
    subprocess.run([args.python_plot, "-c", plot], check=False)


if __name__ == "__main__":
    main()
