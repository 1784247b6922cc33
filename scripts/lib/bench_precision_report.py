#!/usr/bin/env python3
"""The precision table of scripts/bench.sh: one row per examoe-bench result
(one JSON line each, read from the files named on the command line), with
ExaMoE's and PyTorch's tokens/s in CPU time, the GEMM peak of that
precision, the MFU against it, and the speed-ups against ExaMoE fp32 and
against PyTorch at the same precision (torch.autocast for bf16)."""
import json
import sys


def main(paths):
    rows = []
    for p in paths:
        with open(p) as f:
            lines = [l for l in f if l.startswith("{")]
        if lines:
            rows.append(json.loads(lines[-1]))
    if not rows:
        print("bench: no results to tabulate", file=sys.stderr)
        return 1
    base = next((r["tokens_per_s_cpu"] for r in rows if r.get("precision", "fp32") == "fp32"), None)
    head = f"{'precision':<10} {'tokens/s':>10} {'gemm peak':>10} {'MFU':>7} {'PyTorch':>10} {'x PyTorch':>10} {'x fp32':>8}"
    print("\n[bench] per precision (CPU time; gemm peak in GFLOP/s on one core; PyTorch at the same precision)")
    print(head)
    print("-" * len(head))
    for r in rows:
        prec = r.get("precision", "fp32")
        tps = r["tokens_per_s_cpu"]
        torch_tps = r.get("torch_tokens_per_s_cpu")
        vs_torch = f"{tps / torch_tps:10.2f}" if torch_tps else f"{'-':>10}"
        vs_fp32 = f"{tps / base:8.2f}" if base else f"{'-':>8}"
        torch_col = f"{torch_tps:10.1f}" if torch_tps else f"{'-':>10}"
        print(f"{prec:<10} {tps:10.1f} {r['sgemm_gflops_cpu']:10.1f} {100 * r['mfu_cpu']:6.1f}% {torch_col} {vs_torch} {vs_fp32}")
    for r in rows:
        if r.get("matmuls"):
            print(f"  {r.get('precision', 'fp32')}: {r['matmuls']}")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
