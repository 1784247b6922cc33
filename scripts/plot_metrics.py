#!/usr/bin/env python3
"""Plot training and validation loss of ExaMoE runs against tokens seen.

    scripts/plot_metrics.py runs/tiny/metrics.jsonl -o loss.png
    scripts/plot_metrics.py runs/a runs/b -o compare.png     # run directories work too

Reads <run>/metrics.jsonl: one JSON object per line. Step records carry
"tokens", "loss" and "val_loss" (null when no evaluation ran in that
interval); event lines ({"event": "start" | "end", ...}) are skipped. A run
restarted from a checkpoint appends to the same file and repeats the steps
after that checkpoint; for a repeated step the last record wins (the restart's,
which the determinism contract makes equal to the first anyway).

Needs matplotlib (Debian: python3-matplotlib); draws with the Agg backend, so
no display is needed. Without -o the plot goes to loss.png next to the first
metrics file.
"""
import argparse
import json
import math
import os
import sys


def metrics_path(arg):
    return os.path.join(arg, "metrics.jsonl") if os.path.isdir(arg) else arg


def read_metrics(path):
    """Returns (tokens, loss, val_tokens, val_loss) lists sorted by tokens."""
    by_step = {}
    with open(path, encoding="utf-8") as f:
        for lineno, line in enumerate(f, 1):
            line = line.strip()
            if not line:
                continue
            try:
                rec = json.loads(line)
            except json.JSONDecodeError as e:
                # A run killed mid-write can leave a truncated last line.
                print(f"plot_metrics: {path}:{lineno}: skipping a line that is not JSON ({e.msg})", file=sys.stderr)
                continue
            if not isinstance(rec, dict) or "event" in rec or "tokens" not in rec or "loss" not in rec:
                continue
            by_step[rec.get("step", rec["tokens"])] = rec
    recs = sorted(by_step.values(), key=lambda r: r["tokens"])

    def finite(x):
        return isinstance(x, (int, float)) and math.isfinite(x)

    tokens = [r["tokens"] for r in recs if finite(r["loss"])]
    loss = [r["loss"] for r in recs if finite(r["loss"])]
    vt = [r["tokens"] for r in recs if finite(r.get("val_loss"))]
    vl = [r["val_loss"] for r in recs if finite(r.get("val_loss"))]
    return tokens, loss, vt, vl


def main(argv=None):
    ap = argparse.ArgumentParser(description="Plot loss and validation loss of ExaMoE runs against tokens.")
    ap.add_argument("metrics", nargs="+", help="<run>/metrics.jsonl files or run directories")
    ap.add_argument("-o", "--output", help="PNG file to write (default: loss.png next to the first metrics file)")
    ap.add_argument("--title", default=None, help="plot title")
    ap.add_argument("--logy", action="store_true", help="logarithmic loss axis")
    args = ap.parse_args(argv)

    paths = [metrics_path(m) for m in args.metrics]
    for p in paths:
        if not os.path.isfile(p):
            print(f"plot_metrics: error: {p} does not exist; pass <run>/metrics.jsonl or the run directory",
                  file=sys.stderr)
            return 1
    out = args.output or os.path.join(os.path.dirname(os.path.abspath(paths[0])), "loss.png")

    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        # The python3 first on PATH may lack it while the distribution's has it
        # (Debian's python3-matplotlib is for /usr/bin/python3): try that once.
        system = "/usr/bin/python3"
        if (os.path.exists(system) and os.path.realpath(sys.executable) != os.path.realpath(system)
                and not os.environ.get("EXAMOE_PLOT_REEXEC")):
            os.environ["EXAMOE_PLOT_REEXEC"] = "1"
            os.execv(system, [system, os.path.abspath(__file__)] + (sys.argv[1:] if argv is None else list(argv)))
        print("plot_metrics: error: matplotlib is not installed (Debian: apt-get install python3-matplotlib)",
              file=sys.stderr)
        return 1

    fig, ax = plt.subplots(figsize=(7, 4.5), dpi=120)
    plotted = 0
    for i, p in enumerate(paths):
        tokens, loss, vt, vl = read_metrics(p)
        label = os.path.basename(os.path.dirname(os.path.abspath(p))) if len(paths) > 1 else ""
        color = f"C{i % 10}"
        if tokens:
            ax.plot(tokens, loss, color=color, lw=1.2, label=f"{label} train loss".strip())
            plotted += 1
        if vl:
            ax.plot(vt, vl, color=color, lw=1.0, ls="--", marker="o", ms=4, label=f"{label} val loss".strip())
            plotted += 1
        if not tokens and not vl:
            print(f"plot_metrics: warning: {p} holds no step records", file=sys.stderr)
    if plotted == 0:
        print("plot_metrics: error: no step records with a finite loss to plot", file=sys.stderr)
        return 1
    ax.axhline(math.log(256), color="0.6", lw=0.8, ls=":", label="uniform over 256 bytes (5.55)")
    ax.set_xlabel("tokens seen")
    ax.set_ylabel("cross-entropy loss (nats/token)")
    if args.logy:
        ax.set_yscale("log")
    ax.set_title(args.title or ("ExaMoE: " + ", ".join(args.metrics)), fontsize=9)
    ax.grid(True, alpha=0.3)
    ax.legend(fontsize=8)
    fig.tight_layout()
    fig.savefig(out)
    print(f"plot_metrics: wrote {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
