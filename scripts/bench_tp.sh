#!/usr/bin/env bash
# Tensor parallelism (parallel.tp) against data parallelism and one rank:
# the same deck as 1 rank, as dp = NP, and as tp = NP with the
# column-parallel backward overlap on and off (comm.overlap; with
# --set parallel.sequence_parallel=true also the chunked forward
# allgather), one thread per rank, same per-rank micro-batch.
#
#   scripts/bench_tp.sh [DECK] [--steps N] [--warmup N] [--set k=v ...]
#     DECK        default input/bench.toml
#     --steps N   measured steps per run (default 6); --warmup N (default 2)
#   NP=n (default 2), EXAMOE=path (default build/bin/examoe), MPIEXEC=cmd,
#   WORK=dir (keep the runs there; default a temporary directory)
#
# Per configuration, from the metrics.jsonl step records over the measured
# steps (medians): global tokens/s, exposed communication and the tensor-
# parallel collectives' share of it (seconds per step), and the per-rank
# parameter + gradient + optimizer bytes. Prints one JSON line. Timings on a
# shared machine are noisy: compare runs made back to back, several times.
set -euo pipefail
bench_name=bench_tp.sh
source "$(dirname "$0")/lib/bench_args.sh"
for cfg in one dp tp tp_no_overlap; do
  np=$NP extra=()
  case "$cfg" in
    one) np=1 ;;
    dp) extra=(--set parallel.tp=1) ;;
    tp) extra=(--set parallel.tp="$NP" --set comm.overlap=true) ;;
    tp_no_overlap) extra=(--set parallel.tp="$NP" --set comm.overlap=false) ;;
  esac
  rm -rf "$work/$cfg"
  OMP_NUM_THREADS=1 OPENBLAS_NUM_THREADS=1 "$MPIEXEC" -n "$np" "$EXAMOE" "$deck" "${sets[@]}" "${extra[@]}" \
    --set train.steps="$total" --set train.log_every=1 --set train.eval_every=0 --set checkpoint.every=0 \
    --set output.run_dir="$work/$cfg" >"$work/$cfg.log" 2>&1 \
    || { tail -20 "$work/$cfg.log" >&2; exit 1; }
done
python3 - "$work" "$warmup" "$NP" <<'PY'
import json, statistics, sys
work, warmup, np_ = sys.argv[1], int(sys.argv[2]), int(sys.argv[3])
out = {"event": "bench_tp", "ranks": np_}
for cfg in ("one", "dp", "tp", "tp_no_overlap"):
    recs = [json.loads(l) for l in open(f"{work}/{cfg}/metrics.jsonl")]
    steps = [r for r in recs if "loss" in r and r.get("step", 0) > warmup]
    med = lambda f: statistics.median(f(r) for r in steps)
    m = steps[-1]["memory"]
    out[cfg] = {"tokens_per_s": med(lambda r: r["tokens_per_s"]),
                "comm_exposed_s": med(lambda r: r["time"]["comm_exposed"]),
                "tp_comm_s": med(lambda r: r["time"].get("tp", 0.0)),
                "state_bytes_per_rank": m["params"] + m["grads"] + m["optim"],
                "loss_last": steps[-1]["loss"]}
for cfg in ("dp", "tp"):
    out[f"{cfg}_over_one_tokens_per_s"] = out[cfg]["tokens_per_s"] / out["one"]["tokens_per_s"]
print(json.dumps(out))
PY
