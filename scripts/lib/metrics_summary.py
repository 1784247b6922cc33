#!/usr/bin/env python3
"""Summarise benchmark runs from their metrics.jsonl (the benchmark scripts'
shared reader: scripts/bench_layouts.sh, scripts/bench_overlap.sh,
scripts/bench_async_ckpt.sh).

  metrics_summary.py --event E --warmup N [--share S]... [--moe] [--traffic] [--weak BASE]
                     [--gain OFF,ON] [--meta KEY=VALUE]... NAME=RUN_DIR...

Each NAME=RUN_DIR is one configuration and the run directory holding its
rank 0 metrics.jsonl; a NAME given more than once pools the measured steps
of its runs (bench_overlap.sh --repeat). Measured steps are the step
records (every step logged) after the first N (--warmup). Per
configuration, medians over the measured steps unless said otherwise:

  ranks, layout      the run's start record (world size, grid)
  steps              measured steps (all runs of the NAME)
  tokens_per_step    global tokens per step
  tokens_per_s       global tokens per second (the records' tokens_per_s)
  step_s             seconds per step: compute + comm_exposed + io + eval
                     (also its mean, min and max: step_s_mean, ...)
  compute_s          time.compute
  comm_exposed_s     time.comm_exposed (and its mean, comm_exposed_s_mean)
  comm_eff           compute_s / (compute_s + comm_exposed_s)
  S_s                per --share S, that strategy's part of comm_exposed:
                     all_to_all (time.all_to_all, expert parallelism), tp
                     (time.tp, tensor parallelism), context
                     (context_comm_exposed, context parallelism)
  memory             the last measured step's memory record (bytes per rank)
  state_mib          params + grads + optim + buffers, MiB per rank
  loss_last          the last measured step's loss
  moe_last           with --moe: the last measured step's "moe" record
  dp_grads_*_bytes   with --traffic: the bytes ledger's data-parallel
                     gradient bytes per step on rank 0, logical (fp32) and
                     wire; wire_fraction = wire / logical; compress_s
                     (time.compress: the codec's kernels, part of
                     comm_exposed); modeled_dp_comm_s: the wire bytes at 100
                     and 25 Gb/s, a model, not a measurement
  pipeline           when the records carry one (parallel.pp > 1): the
                     schedule, stages, virtual_stages, micro_batches,
                     bubble (mean over the stages, median over the steps),
                     bubble_per_stage, bubble_theory, peak_contexts (last)
  weak_eff           with --weak BASE: tokens_per_s / (ranks x BASE's)

and, over the configurations, NAME_over_one_tokens_per_s and
NAME_over_dp_tokens_per_s (but not one_over_dp) where a configuration "one"
or "dp" ran, and with
--gain OFF,ON overlap_gain_s = comm_exposed_s(OFF) - comm_exposed_s(ON).
--meta KEY=VALUE adds a top-level field (VALUE as JSON when it parses,
else a string). Prints a table and, last, one JSON line
({"event": E, ...}). It reports times; it never asserts one.
"""
import argparse
import datetime
import json
import os
import statistics
import sys

SHARES = {
    "all_to_all": lambda r: r["time"]["all_to_all"],
    "tp": lambda r: r["time"]["tp"],
    "context": lambda r: r["context_comm_exposed"],
}


def fail(msg):
    sys.exit(f"metrics_summary.py: {msg}")


def read_run(run_dir, warmup):
    """(start record, measured step records) of one run directory."""
    path = os.path.join(run_dir, "metrics.jsonl")
    try:
        with open(path) as f:
            recs = [json.loads(line) for line in f if line.strip()]
    except OSError as e:
        fail(f"cannot read {path}: {e}")
    start = next((r for r in recs if r.get("event") == "start"), {})
    steps = [r for r in recs if "event" not in r and "time" in r and r["step"] > warmup]
    if not steps:
        fail(f"{path}: no step records after the {warmup} warm-up steps")
    return start, steps


def step_s(r):
    t = r["time"]
    return t["compute"] + t["comm_exposed"] + t["io"] + t["eval"]


def summary(runs, args):
    med = statistics.median
    starts = [s for s, _ in runs]
    recs = [r for _, steps in runs for r in steps]
    last = runs[-1][1][-1]
    t = [step_s(r) for r in recs]
    comp = med(r["time"]["compute"] for r in recs)
    comm = med(r["time"]["comm_exposed"] for r in recs)
    m = last["memory"]
    out = {
        "runs": len(runs),
        "ranks": starts[0].get("world_size"),
        "layout": starts[0].get("layout"),
        "steps": len(recs),
        "tokens_per_step": round(last["tokens"] / last["step"]),
        "tokens_per_s": med(r["tokens_per_s"] for r in recs),
        "step_s": med(t),
        "step_s_mean": statistics.fmean(t),
        "step_s_min": min(t),
        "step_s_max": max(t),
        "compute_s": comp,
        "comm_exposed_s": comm,
        "comm_exposed_s_mean": statistics.fmean(r["time"]["comm_exposed"] for r in recs),
        "comm_eff": comp / (comp + comm) if comp + comm > 0 else None,
    }
    for s in args.share:
        out[f"{s}_s"] = med(SHARES[s](r) for r in recs)
    if args.traffic:
        # The bytes ledger (this rank's, per step) and the codec's time.
        dp = [r["comm"]["dp_grads"] for r in recs]
        wire = med(x["wire_bytes"] for x in dp)
        logical = med(x["logical_bytes"] for x in dp)
        out["dp_grads_logical_bytes"] = logical
        out["dp_grads_wire_bytes"] = wire
        out["wire_fraction"] = wire / logical if logical > 0 else None
        out["compress_s"] = med(r["time"]["compress"] for r in recs)
        # A model, not a measurement: shared memory here is faster than any
        # network, so the wire bytes are also priced at link bandwidths.
        out["modeled_dp_comm_s"] = {f"{g}Gbps": wire * 8 / (g * 1e9) for g in (100, 25)}
    out["memory"] = m
    out["state_mib"] = (m["params"] + m["grads"] + m["optim"] + m["buffers"]) / 2**20
    out["loss_last"] = last["loss"]
    if args.moe:
        if "moe" not in last:
            fail("--moe: the step records carry no \"moe\" record (a dense model?)")
        out["moe_last"] = last["moe"]
    p = [r["pipeline"] for r in recs if "pipeline" in r]
    if p:
        out["pipeline"] = {
            "schedule": p[0]["schedule"],
            "stages": p[0]["stages"],
            "virtual_stages": p[0]["virtual_stages"],
            "micro_batches": p[0]["micro_batches"],
            "bubble": med(statistics.fmean(x["bubble"]) for x in p),
            "bubble_per_stage": [med(x["bubble"][s] for x in p) for s in range(p[0]["stages"])],
            "bubble_theory": p[0]["bubble_theory"],
            "peak_contexts": p[-1]["peak_contexts"],
        }
    return out


def table(res, args):
    cols = [("ranks", "ranks", "d"), ("tok/s", "tokens_per_s", ".1f"), ("step s", "step_s", ".3f"),
            ("compute s", "compute_s", ".3f"), ("comm s", "comm_exposed_s", ".3f")]
    cols += [(f"{s} s", f"{s}_s", ".3f") for s in args.share]
    cols += [("comm eff", "comm_eff", ".1%")]
    if args.weak:
        cols += [("weak eff", "weak_eff", ".1%")]
    cols += [("state MiB", "state_mib", ".1f"), ("act MiB", "act_mib", ".1f")]
    if any("pipeline" in r for r in res.values()):
        cols += [("bubble", "bubble", ".3f"), ("theory", "bubble_theory", ".3f")]
    width = max(6, *(len(n) for n in res))
    lines = [f"{'config':<{width}}" + "".join(f" {h:>{max(8, len(h))}}" for h, _, _ in cols)]
    for name, r in res.items():
        row = dict(r, act_mib=r["memory"]["activations"] / 2**20, **r.get("pipeline", {}))
        cells = []
        for h, k, spec in cols:
            w = max(8, len(h))
            v = row.get(k)
            cells.append(f" {v:>{w}{spec}}" if v is not None else f" {'-':>{w}}")
        lines.append(f"{name:<{width}}" + "".join(cells))
    return "\n".join(lines)


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--event", required=True)
    ap.add_argument("--warmup", type=int, required=True)
    ap.add_argument("--share", action="append", default=[], choices=sorted(SHARES))
    ap.add_argument("--moe", action="store_true")
    ap.add_argument("--traffic", action="store_true")
    ap.add_argument("--weak")
    ap.add_argument("--gain")
    ap.add_argument("--meta", action="append", default=[])
    ap.add_argument("runs", nargs="+", metavar="NAME=RUN_DIR")
    args = ap.parse_args()

    runs = {}
    for a in args.runs:
        name, sep, run_dir = a.partition("=")
        if not sep or not name or not run_dir:
            fail(f"'{a}' is not NAME=RUN_DIR")
        runs.setdefault(name, []).append(read_run(run_dir, args.warmup))
    res = {name: summary(r, args) for name, r in runs.items()}

    out = {"event": args.event,
           "date": datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%dT%H:%M:%SZ")}
    for kv in args.meta:
        k, sep, v = kv.partition("=")
        if not sep:
            fail(f"--meta '{kv}' is not KEY=VALUE")
        try:
            out[k] = json.loads(v)
        except ValueError:
            out[k] = v
    out["warmup"] = args.warmup
    if args.weak:
        if args.weak not in res:
            fail(f"--weak {args.weak}: no such configuration")
        base = res[args.weak]["tokens_per_s"]
        for name, r in res.items():
            if name != args.weak:
                r["weak_eff"] = r["tokens_per_s"] / (r["ranks"] * base)
    out.update(res)
    for base in ("one", "dp"):
        if base in res:
            for name, r in res.items():
                if name not in (base, "one"):
                    out[f"{name}_over_{base}_tokens_per_s"] = r["tokens_per_s"] / res[base]["tokens_per_s"]
    if args.gain:
        off, _, on = args.gain.partition(",")
        if off not in res or on not in res:
            fail(f"--gain {args.gain}: wants two configurations that ran, OFF,ON")
        out["overlap_gain_s"] = res[off]["comm_exposed_s"] - res[on]["comm_exposed_s"]

    print(table(res, args))
    if args.gain:
        g, c = out["overlap_gain_s"], res[off]["comm_exposed_s"]
        share = f" ({100 * g / c:.0f}% of {off}'s exposed comm)" if c > 0 else ""
        print(f"overlap gain (exposed comm {off} - {on}): {g:.3f} s/step{share}")
    print(json.dumps(out, separators=(",", ":")))


if __name__ == "__main__":
    main()
