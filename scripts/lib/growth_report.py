#!/usr/bin/env python3
"""Expert growth's quality measurement from runs' metrics.jsonl (scripts/growth-bench.sh).

  growth_report.py quality OUT.png NAME=DIR ...
      the validation losses of each run as a table and one plot."""
import json
import sys


def records(run_dir):
    with open(f"{run_dir}/metrics.jsonl") as f:
        return [json.loads(l) for l in f if l.startswith("{")]


def quality(out, runs):
    curves = {}
    for name, d in runs:
        # The last record of a step wins (a resumed run repeats steps).
        last = {r["step"]: r["val_loss"] for r in records(d) if "loss" in r and r.get("val_loss") is not None}
        curves[name] = sorted(last.items())
    steps = sorted({s for c in curves.values() for s, _ in c})
    print("step " + " ".join(f"{n:>10}" for n in curves))
    for s in steps:
        row = [dict(c).get(s) for c in curves.values()]
        print(f"{s:>4} " + " ".join(f"{v:10.4f}" if v is not None else f"{'-':>10}" for v in row))
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        print("no matplotlib: the table only", file=sys.stderr)
        return
    fig, ax = plt.subplots(figsize=(6, 4))
    for name, c in curves.items():
        ax.plot([s for s, _ in c], [v for _, v in c], marker="o", ms=3, label=name)
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss (nats/token)")
    ax.set_title("expert growth on the bundled corpus (input/grow.toml)")
    ax.legend()
    fig.tight_layout()
    fig.savefig(out, dpi=110)
    print(f"plot: {out}")


def main(argv):
    if len(argv) >= 3 and argv[0] == "quality":
        quality(argv[1], [a.split("=", 1) for a in argv[2:]])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
