#!/usr/bin/env bash
# Expert parallelism (parallel.ep) against data parallelism on the same ranks:
# NP ranks as ep = NP (experts spread over the ranks, tokens exchanged by
# all-to-all) and as plain dp = NP (every rank holds every expert), same
# deck, same per-rank micro-batch, one thread per rank.
#
#   scripts/bench_ep.sh [DECK] [--steps N] [--warmup N] [--set k=v ...]
#     DECK        default input/bench.toml
#     --steps N   measured steps per run (default 6); --warmup N (default 2)
#   NP=n (default 2), EXAMOE=path (default build/bin/examoe), MPIEXEC=cmd,
#   WORK=dir (keep the runs there; default a temporary directory)
#
# Per configuration, from rank 0's metrics.jsonl over the measured steps
# (medians): global tokens/s, exposed communication and the expert
# all-to-all's share of it (seconds per step; the all-to-all is blocking,
# so all of it is exposed), per-rank memory of the experts, and the last
# measured step's MoE load record ("moe"). Prints one JSON line.
set -euo pipefail
bench_name=bench_ep.sh
source "$(dirname "$0")/lib/bench_args.sh"
for cfg in dp ep; do
  extra=(--set parallel.ep=1)
  [ "$cfg" = ep ] && extra=(--set parallel.ep="$NP")
  rm -rf "$work/$cfg"
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$MPIEXEC" -n "$NP" "$EXAMOE" "$deck" "${sets[@]}" "${extra[@]}" \
    --set train.steps="$total" --set train.log_every=1 --set train.eval_every=0 --set checkpoint.every=0 \
    --set output.run_dir="$work/$cfg" >"$work/$cfg.log" 2>&1 \
    || { tail -20 "$work/$cfg.log" >&2; exit 1; }
done
python3 - "$work" "$warmup" "$NP" <<'PY'
import json, statistics, sys
work, warmup, np_ = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = {"event": "bench_ep", "ranks": np_}
for cfg in ("dp", "ep"):
    recs = [json.loads(l) for l in open(f"{work}/{cfg}/metrics.jsonl")]
    steps = [r for r in recs if "loss" in r and r.get("step", 0) > warmup]
    med = lambda f: statistics.median(f(r) for r in steps)
    res = {"tokens_per_s": med(lambda r: r["tokens_per_s"]),
           "comm_exposed_s": med(lambda r: r["time"]["comm_exposed"]),
           "all_to_all_s": med(lambda r: r["time"].get("all_to_all", 0.0)),
           "expert_bytes": steps[-1]["memory"]["experts"],
           "loss_last": steps[-1]["loss"]}
    # Step records carry the step's expert load under "moe" (every MoE
    # layer's max/mean and drops, summed over all ranks).
    res["moe_load_last"] = steps[-1]["moe"]
    out[cfg] = res
out["ep_over_dp_tokens_per_s"] = out["ep"]["tokens_per_s"] / out["dp"]["tokens_per_s"]
print(json.dumps(out))
PY
