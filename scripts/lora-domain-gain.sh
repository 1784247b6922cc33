#!/usr/bin/env bash
# LoRA's domain gain (docs/lora.md): the quick start's model (runs/tiny,
# trained by input/tiny.toml first when missing) fine-tuned on data/legal.txt
# by input/finetune.toml with rank-8 adapters on the attention projections,
# on attention and every routed expert, rank 32 on both, and with every
# parameter training, the same steps and tokens; the validation loss every
# 10 steps, and the base model's. Writes docs/lora_domain.{json,png}.
#
#   scripts/lora-domain-gain.sh        (NP ranks, default 2; EXAMOE, WORK)
set -euo pipefail
root=$(cd "$(dirname "$0")/.." && pwd)
cd "$root"
examoe=${EXAMOE:-build/bin/examoe}
np=${NP:-2}
work=${WORK:-$(mktemp -d)}
run() { mpiexec -n "$np" "$examoe" "$@"; }
[ -d runs/tiny/ckpt ] || run input/tiny.toml
common=(--set train.eval_every=10 --set train.log_every=10 --set checkpoint.every=0)
run input/finetune.toml "${common[@]}" --set lora.rank=8 --set lora.targets=attention \
  --set output.run_dir="$work/r8att" > "$work/r8att.log"
run input/finetune.toml "${common[@]}" --set lora.rank=8 --set output.run_dir="$work/r8" > "$work/r8.log"
run input/finetune.toml "${common[@]}" --set lora.rank=32 --set lora.alpha=64 --set output.run_dir="$work/r32" > "$work/r32.log"
run input/finetune.toml "${common[@]}" --set lora.rank=0 --set output.run_dir="$work/full" > "$work/full.log"
# The base model on the same validation windows: one step at lr ~0.
run input/finetune.toml --set lora.rank=0 --set train.steps=1 --set optim.lr=1e-12 --set optim.min_lr=0 \
  --set optim.warmup_steps=0 --set train.eval_every=1 --set train.log_every=1 --set checkpoint.every=0 \
  --set output.run_dir="$work/base" > "$work/base.log"
"${PYTHON:-/usr/bin/python3}" - "$work" "$root/docs/lora_domain" <<'PY'
import json, sys
work, out = sys.argv[1], sys.argv[2]
def curve(run):
    pts = {}
    for line in open(f"{work}/{run}/metrics.jsonl"):
        r = json.loads(line)
        if r.get("val_loss") is not None and "step" in r:
            pts[r["step"]] = r["val_loss"]
    return sorted(pts.items())
def trainable(run):
    for line in open(f"{work}/{run}.log"):
        if line.startswith("lora:"):
            return line.strip()
    return "every parameter"
base = curve("base")[0][1]
res = {"base_val_loss": base, "runs": {}}
for run, label in (("r8att", "LoRA rank 8, attention"), ("r8", "LoRA rank 8, attention + experts"),
                   ("r32", "LoRA rank 32, attention + experts"), ("full", "full fine-tuning")):
    c = curve(run)
    res["runs"][run] = {"label": label, "trainable": trainable(run), "val_loss": c, "final": c[-1][1],
                        "gain": base - c[-1][1]}
full_gain = res["runs"]["full"]["gain"]
for r in res["runs"].values():
    r["share_of_full_gain"] = r["gain"] / full_gain
json.dump(res, open(out + ".json", "w"), indent=1)
for k, r in res["runs"].items():
    print(f"{r['label']:28s} final val {r['final']:.4f}  gain {r['gain']:.4f}  ({100 * r['share_of_full_gain']:.0f}% of full)")
print(f"base model: {base:.4f}")
try:
    import matplotlib
    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
except ImportError:
    sys.exit(0)
fig, ax = plt.subplots(figsize=(6, 4))
ax.axhline(base, color="gray", ls="--", label=f"pre-trained model ({base:.3f})")
for r in res["runs"].values():
    xs, ys = zip(*r["val_loss"])
    ax.plot(xs, ys, marker="o", ms=3, label=f"{r['label']} ({r['final']:.3f})")
ax.set_xlabel("fine-tuning step")
ax.set_ylabel("validation loss on data/legal.txt (nats/byte)")
ax.set_title("input/finetune.toml: LoRA vs full fine-tuning")
ax.legend(fontsize=8)
fig.tight_layout()
fig.savefig(out + ".png", dpi=120)
PY
