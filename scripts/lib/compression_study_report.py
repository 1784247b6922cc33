#!/usr/bin/env python3
"""Report of scripts/compression_study.sh: per mode, the final validation
loss of each seed, their mean and standard deviation, the mean's change
against the mode "none", and the data-parallel gradients' wire bytes as a
share of the logical ones (over the run, and at the last step: after a
dense warm-up); with --plot, the mean validation curves.

  compression_study_report.py [--plot FILE] MODE=RUN_DIR ...

A MODE given for several run directories (one per seed) pools them. Each
RUN_DIR holds rank 0's metrics.jsonl: step records with "val_loss" (null
between evaluations) and "comm": {"dp_grads": {"logical_bytes",
"wire_bytes"}}, and an end record {"event": "end", "val_loss"}.
"""
import argparse
import json
import os
import statistics
import sys


def read_run(run_dir):
    """Returns (final val loss, [(step, val)], wire / logical over the run,
    wire / logical of the last step record)."""
    path = os.path.join(run_dir, "metrics.jsonl")
    curve, final, logical, wire, last = [], None, 0.0, 0.0, float("nan")
    with open(path) as f:
        for line in f:
            rec = json.loads(line)
            if rec.get("event") == "end":
                final = rec.get("val_loss")
            elif "step" in rec and "event" not in rec:
                if rec.get("val_loss") is not None:
                    curve.append((rec["step"], rec["val_loss"]))
                grads = rec.get("comm", {}).get("dp_grads", {})
                logical += grads.get("logical_bytes", 0.0)
                wire += grads.get("wire_bytes", 0.0)
                if grads.get("logical_bytes"):
                    last = grads.get("wire_bytes", 0.0) / grads["logical_bytes"]
    if final is None:
        sys.exit(f"compression_study_report.py: {path} has no end record (the run did not finish)")
    return final, curve, (wire / logical if logical > 0 else float("nan")), last


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--plot", help="write the mean validation curves here (PNG)")
    ap.add_argument("runs", nargs="+", metavar="MODE=RUN_DIR")
    args = ap.parse_args()
    modes = {}
    for item in args.runs:
        mode, sep, run_dir = item.partition("=")
        if not sep:
            sys.exit(f"compression_study_report.py: '{item}' is not MODE=RUN_DIR")
        modes.setdefault(mode, []).append(read_run(run_dir))
    base = modes.get("none")
    base_mean = statistics.mean(r[0] for r in base) if base else None
    print("| mode | seeds | dp_grads wire / logical (run; last step) | final validation loss per seed | mean | std "
          "| mean vs none |")
    print("|---|---|---|---|---|---|---|")
    for mode, runs in modes.items():
        finals = [r[0] for r in runs]
        mean = statistics.mean(finals)
        std = statistics.stdev(finals) if len(finals) > 1 else 0.0
        rel = f"{100 * (mean / base_mean - 1):+.2f}%" if base_mean and mode != "none" else ""
        wire = statistics.mean(r[2] for r in runs)
        last = statistics.mean(r[3] for r in runs)
        print(f"| {mode} | {len(runs)} | {100 * wire:.1f}%; {100 * last:.1f}% | "
              f"{', '.join(f'{v:.4f}' for v in finals)} | "
              f"{mean:.4f} | {std:.4f} | {rel} |")
    if not args.plot:
        return
    try:
        import matplotlib
        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        sys.exit("compression_study_report.py: --plot needs matplotlib (Debian: python3-matplotlib)")
    fig, ax = plt.subplots(figsize=(7, 4.5))
    for mode, runs in modes.items():
        steps = sorted({s for r in runs for s, _ in r[1]})
        means = []
        for s in steps:
            vals = [v for r in runs for t, v in r[1] if t == s]
            means.append(statistics.mean(vals))
        ax.plot(steps, means, marker="o", markersize=3, label=f"{mode} ({len(runs)} seeds)")
    ax.set_xlabel("step")
    ax.set_ylabel("validation loss (mean over seeds)")
    ax.set_title("gradient compression: validation loss")
    ax.grid(True, alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(args.plot, dpi=110)
    print(f"plot: {args.plot}")


if __name__ == "__main__":
    main()
