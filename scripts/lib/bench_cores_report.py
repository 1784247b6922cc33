"""The table and JSON line of `scripts/bench.sh --cores N`
(scripts/lib/bench_cores.sh): tokens/s per layout, MFU against N times the
one-core sgemm peak, each layout's ratio to PyTorch's best, and the
best-against-best ratio.

The peak is the one-core sgemm rate in CPU time (what a core computes while
it runs), not in wall time: the wall-clock rate of a half-second sgemm on a
loaded machine is the share of a core it happened to get (it read 10 for a
core that computes 60-75 GFLOP/s), which would put MFU above 100%. On a
quiet machine the two agree; under load the MFU column (wall tokens/s
over CPU-time peak) reads low, and its ratios still hold.

    python3 bench_cores_report.py WORK N WARMUP
"""

import json
import os
import statistics
import sys

work, cores, warmup = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
exp = json.load(open(os.path.join(work, "export.json")))
peak = cores * exp["sgemm_gflops_cpu"]
flops = exp["flops_per_token"]
tokens = exp["tokens_per_step"]
rows = []

EXAMOE = (("serial_ranks", f"ExaMoE Serial, {cores} ranks x 1 thread (dp = {cores})"),
          ("openmp_ranks", f"ExaMoE OpenMP, {cores} ranks x 1 thread (dp = {cores})"),
          ("openmp_threads", f"ExaMoE OpenMP, 1 rank x {cores} threads"))
for key, label in EXAMOE:
    path = os.path.join(work, key, "metrics.jsonl")
    if not os.path.exists(path):
        continue
    recs = [json.loads(line) for line in open(path)]
    timed = [r for r in recs if "loss" in r and r.get("step", 0) > warmup]
    if not timed:
        raise SystemExit(f"bench.sh --cores: {path} has no step after the {warmup} warmup steps")
    tps = [r["tokens_per_s"] for r in timed]
    rows.append(dict(key=key, framework="examoe", layout=label, tokens_per_s=statistics.median(tps),
                     tokens_per_s_best=max(tps), loss_last=timed[-1]["loss"]))

TORCH = (("torch_ddp", f"PyTorch DDP (gloo), {cores} processes x 1 thread"),
         ("torch_threads", f"PyTorch, 1 process x {cores} threads"))
for key, label in TORCH:
    j = json.load(open(os.path.join(work, key + ".json")))
    if j["tokens_per_step"] != tokens:
        raise SystemExit(f"bench.sh --cores: PyTorch {key} trained {j['tokens_per_step']} tokens per step, "
                         f"the exported batches hold {tokens}")
    rows.append(dict(key=key, framework="pytorch", layout=label, tokens_per_s=j["tokens_per_s"],
                     tokens_per_s_best=j["tokens_per_s_best"], loss_last=j["losses"][-1],
                     tokens_per_s_cpu=cores * tokens / j["median_step_cpu_s"]))

for r in rows:
    r["mfu"] = flops * r["tokens_per_s"] / (peak * 1e9) if peak > 0 else 0.0
best = {fw: max((r for r in rows if r["framework"] == fw), key=lambda r: r["tokens_per_s"], default=None)
        for fw in ("examoe", "pytorch")}
for r in rows:
    r["ratio_to_torch_best"] = r["tokens_per_s"] / best["pytorch"]["tokens_per_s"]

load = [float(open(os.path.join(work, f)).read() or -1) for f in ("load_before", "load_after")]
skipped = [s for s in open(os.path.join(work, "skipped")).read().splitlines() if s]
print(f"{cores}-core comparison: {tokens} tokens per step ({exp['micro_batch']} x {exp['seq_len']} tokens per "
      f"micro-batch, {exp['grad_accum']} micro-batches), {exp['steps']} timed steps after {exp['warmup']}; "
      f"sgemm peak {exp['sgemm_gflops_cpu']:.1f} GFLOP/s per core in CPU time ({exp['sgemm_gflops']:.1f} wall), "
      f"{peak:.1f} for {cores} cores; "
      f"load average {load[0]:.2f} before, {load[1]:.2f} after")
print(f"| layout | tokens/s (median) | best step | MFU | / PyTorch best |")
print(f"|---|---|---|---|---|")
for r in rows:
    print(f"| {r['layout']} | {r['tokens_per_s']:.0f} | {r['tokens_per_s_best']:.0f} | {100 * r['mfu']:.1f}% | "
          f"{r['ratio_to_torch_best']:.2f} |")
for s in skipped:
    print(f"skipped {s}")
warnings = [w for w in open(os.path.join(work, "warnings")).read().splitlines() if w]
for w in warnings:
    print(w)
out = dict(event="bench_cores", cores=cores, tokens_per_step=tokens, flops_per_token=flops,
           sgemm_gflops_core=exp["sgemm_gflops_cpu"], sgemm_gflops_core_wall=exp["sgemm_gflops"], sgemm_gflops_peak=peak, load_before=load[0], load_after=load[1],
           layouts=rows, skipped=skipped, warnings=warnings)
if best["examoe"] is not None:
    out["best_examoe"] = best["examoe"]["key"]
    out["best_pytorch"] = best["pytorch"]["key"]
    out["best_ratio"] = best["examoe"]["tokens_per_s"] / best["pytorch"]["tokens_per_s"]
    print(f"best against best: {best['examoe']['layout']} / {best['pytorch']['layout']} = {out['best_ratio']:.2f}")
print(json.dumps(out))
