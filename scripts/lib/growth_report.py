#!/usr/bin/env python3
"""Expert growth's measurements from runs' metrics.jsonl (scripts/growth-bench.sh).

  growth_report.py speed GROWN_DIR STATIC_DIR [NO_DISTILL_DIR]
      tokens/s of each run over its step records (the growth stalls and the
      distillation teacher's forwards fall inside the grown run's
      intervals), their ratio, each event's stall and teacher, and the
      teacher's share of the grown run's time.
  growth_report.py quality OUT.png NAME=DIR ...
      the validation losses of each run as a table and one plot."""
import json
import sys


def records(run_dir):
    with open(f"{run_dir}/metrics.jsonl") as f:
        return [json.loads(l) for l in f if l.startswith("{")]


def throughput(run_dir):
    """tokens/s over the step records, and the growth events."""
    start = next(r for r in records(run_dir) if r.get("event") == "start")
    cfg = start["config"]
    per_step = cfg["train"]["micro_batch"] * cfg["train"]["grad_accum"] * start["layout"]["dp"] * cfg["model"]["seq_len"]
    tokens = seconds = teacher = 0.0
    prev = None
    events = []
    for r in records(run_dir):
        if r.get("event") == "growth":
            events.append(r)
        if "tokens_per_s" in r:
            if prev is not None:  # the first interval holds the start-up's warm caches
                n = (r["step"] - prev) * per_step
                tokens += n
                seconds += n / r["tokens_per_s"]
                if "distill" in r:
                    teacher += r["distill"]["teacher_s"] * r["distill"]["steps"]
            prev = r["step"]
    return tokens / seconds, events, teacher / seconds


def speed(grown, static, plain=None):
    g, events, share = throughput(grown)
    s, _, _ = throughput(static)
    print(f"grown  {g:10.0f} tokens/s  ({grown})")
    print(f"static {s:10.0f} tokens/s  ({static})")
    print(f"efficiency through growth: {100 * g / s:.1f}% of the static run")
    print(f"distillation teacher: {100 * share:.1f}% of the grown run's time")
    if plain:
        p, _, _ = throughput(plain)
        print(f"grown without distillation {p:10.0f} tokens/s: {100 * p / s:.1f}% of the static run")
    for e in events:
        print(f"  event after step {e['step']}: {e['experts_before']} -> {e['experts_after']} experts, "
              f"stall {1e3 * e['stall_s']:.1f} ms (teacher made and saved in {1e3 * e.get('teacher_s', 0):.1f} ms)")


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
    if len(argv) in (3, 4) and argv[0] == "speed":
        speed(*argv[1:])
        return 0
    if len(argv) >= 3 and argv[0] == "quality":
        quality(argv[1], [a.split("=", 1) for a in argv[2:]])
        return 0
    print(__doc__, file=sys.stderr)
    return 2


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
