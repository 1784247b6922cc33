#!/usr/bin/env python3
"""ExaMoE checkpoint -> PyTorch state_dict, with h5py.

    scripts/ckpt_to_torch.py CHECKPOINT [-o model.pt] [--optim] [--config-out cfg.json] [--no-verify]
    scripts/ckpt_to_torch.py CHECKPOINT --peft DIR     # a LoRA run's adapters, in Hugging Face PEFT's layout

CHECKPOINT is what `examoe eval --checkpoint` takes: a run directory (holding
ckpt/), a checkpoint directory (its `latest`, else the newest step_<N>), a
step directory or a state.h5 file. The file format is
docs/checkpoint-format.md.

The state_dict maps each parameter's global name to a float32 tensor of its
global shape. Names and shapes already follow PyTorch's conventions
(nn.Linear weights are [out, in], nn.Embedding [V, d], norms [d]; experts
are stacked [E, F, d] / [E, d, F]), so a module tree with the same names
takes it with load_state_dict(strict=True), no renames or transposes.
With --optim the AdamW moments come along as "optim.exp_avg.<name>" and
"optim.exp_avg_sq.<name>" entries.

Before converting it verifies what ExaMoE verifies on load: the metadata
checksum, every dataset's checksum (recomputed from the data) and the Merkle
root over them (--no-verify skips this). -o saves the state_dict with
torch.save; --config-out writes the run's resolved configuration (JSON, as
`examoe --check` resolves the deck).

--peft DIR writes a LoRA run's adapters (docs/architecture.md, "LoRA") as
PEFT saves them: DIR/adapter_model.bin (torch.save) with
"base_model.model.<module>.lora_A.weight" [r, in] and ".lora_B.weight"
[out, r], and DIR/adapter_config.json (peft_type LORA, r, lora_alpha,
target_modules, lora_dropout 0, bias "none"); the embedding's as PEFT's
nn.Embedding adapters, "base_model.model.embed.lora_embedding_A" [r, V] and
"lora_embedding_B" [d, r] (ExaMoE's B and A transposed). <module> is the adapted
matrix's name less ".weight" (layers.0.attn.wq, layers.0.mlp.w1); the
stacked adapters of the shared and routed experts become one module per
expert, layers.1.moe.shared.<s>.w1 and layers.1.moe.experts.<e>.w1. A module tree with those nn.Linear names (no
bias) loads them with PEFT's set_peft_model_state_dict.

As a module: load_checkpoint(path) -> (state_dict, info), where info holds
"file", "step", "config" (dict), "deck" (text) and "layout" (dict).
Needs h5py and numpy; torch only for the state_dict itself.
"""
import argparse
import json
import os
import re
import sys

import h5py
import numpy as np

MODEL, EXP_AVG, EXP_AVG_SQ, STATE = "model", "optim/exp_avg", "optim/exp_avg_sq", "state"
CHECKPOINT_FILE = "state.h5"
FORMAT_VERSION = 1


# ---- checksums (docs/checkpoint-format.md "Checksums") -------------------------

def _fmix64(z):
    z = (z ^ (z >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
    z = (z ^ (z >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
    return z ^ (z >> np.uint64(31))


def chunk_checksums(arr, chunk):
    """The checksum of each run of `chunk` elements of the flat row-major
    float32 array: sum_i fmix(fmix(bits_i ^ fmix(i + G)) ^ (i*K + G)) mod
    2^64 over the global index i of the run's elements."""
    G = np.uint64(0x9E3779B97F4A7C15)
    K = np.uint64(0xD6E8FEB86659FD93)
    flat = np.ascontiguousarray(arr, dtype="<f4").reshape(-1)
    sums = []
    with np.errstate(over="ignore"):
        for begin in range(0, flat.size, chunk):
            bits = flat[begin:begin + chunk].view("<u4").astype(np.uint64)
            i = np.arange(begin, begin + bits.size, dtype=np.uint64)
            h = _fmix64(bits ^ _fmix64(i + G))
            sums.append(int(np.sum(_fmix64(h ^ (i * K + G)), dtype=np.uint64)))
    return sums


def checksum(arr, chunk=1 << 22):
    """The dataset checksum: the chunk checksums' sum mod 2^64 (any chunk size)."""
    return sum(chunk_checksums(arr, chunk)) & ((1 << 64) - 1)


# XXH64 (seed 0) in pure Python: it hashes only short byte strings here.
_P1, _P2, _P3, _P4, _P5 = (0x9E3779B185EBCA87, 0xC2B2AE3D27D4EB4F, 0x165667B19E3779F9, 0x85EBCA77C2B2AE63,
                           0x27D4EB2F165667C5)
_MASK = (1 << 64) - 1


def _rotl(x, r):
    return ((x << r) | (x >> (64 - r))) & _MASK


def _round(acc, lane):
    return (_rotl((acc + lane * _P2) & _MASK, 31) * _P1) & _MASK


def xxh64(data, seed=0):
    n, i = len(data), 0
    u64 = lambda k: int.from_bytes(data[k:k + 8], "little")
    if n >= 32:
        v = [(seed + _P1 + _P2) & _MASK, (seed + _P2) & _MASK, seed, (seed - _P1) & _MASK]
        while i + 32 <= n:
            v = [_round(v[j], u64(i + 8 * j)) for j in range(4)]
            i += 32
        h = (_rotl(v[0], 1) + _rotl(v[1], 7) + _rotl(v[2], 12) + _rotl(v[3], 18)) & _MASK
        for x in v:
            h = ((h ^ _round(0, x)) * _P1 + _P4) & _MASK
    else:
        h = (seed + _P5) & _MASK
    h = (h + n) & _MASK
    while i + 8 <= n:
        h = (_rotl(h ^ _round(0, u64(i)), 27) * _P1 + _P4) & _MASK
        i += 8
    if i + 4 <= n:
        h = (_rotl(h ^ ((int.from_bytes(data[i:i + 4], "little") * _P1) & _MASK), 23) * _P2 + _P3) & _MASK
        i += 4
    while i < n:
        h = (_rotl(h ^ ((data[i] * _P5) & _MASK), 11) * _P1) & _MASK
        i += 1
    h ^= h >> 33
    h = (h * _P2) & _MASK
    h ^= h >> 29
    h = (h * _P3) & _MASK
    return h ^ (h >> 32)


def _u64(x):
    return int(x).to_bytes(8, "little")


def leaf(name_bytes, c):
    return xxh64(b"\x00" + _u64(len(name_bytes)) + name_bytes + _u64(c))


def merkle_root(entries):
    """entries: (dataset path, checksum) sorted by path."""
    if not entries:
        return xxh64(b"\x02")
    level = [leaf(p.encode(), c) for p, c in entries]
    while len(level) > 1:
        up = [xxh64(b"\x01" + _u64(level[k]) + _u64(level[k + 1])) for k in range(0, len(level) - 1, 2)]
        if len(level) % 2:
            up.append(level[-1])
        level = up
    return level[0]


def _raw(v):
    return bytes(v) if isinstance(v, (bytes, np.bytes_)) else str(v).encode()


def meta_checksum(at):
    """The metadata checksum, from the attributes on "/" (a mapping)."""
    s = lambda b: _u64(len(b)) + b
    b = b"examoe-meta-1" + _u64(at["step"]) + _u64(at["tokens_seen"]) + _u64(at["data_cursor"])
    rng = [int(x) for x in np.atleast_1d(at["rng_state"])] if at.get("rng_state") is not None else []
    b += _u64(len(rng)) + b"".join(_u64(x) for x in rng)
    lr = sorted((k[len("lr_schedule."):].encode(), float(v)) for k, v in at.items() if k.startswith("lr_schedule."))
    b += _u64(len(lr)) + b"".join(s(k) + np.float64(v).tobytes() for k, v in lr)
    b += s(_raw(at["deck"])) + s(_raw(at["config_json"])) + s(_raw(at["layout"]))
    return leaf(b, 0)


# ---- reading -----------------------------------------------------------------

def resolve_checkpoint(path):
    """The state.h5 a run, checkpoint or step directory (or the file) names."""
    if os.path.isfile(path):
        return path
    if not os.path.isdir(path):
        raise SystemExit(f"{path}: no such checkpoint, directory or file")
    for candidate in (os.path.join(path, CHECKPOINT_FILE), os.path.join(path, "latest", CHECKPOINT_FILE)):
        if os.path.isfile(candidate):
            return candidate
    if os.path.isdir(os.path.join(path, "ckpt")):
        return resolve_checkpoint(os.path.join(path, "ckpt"))
    steps = sorted((int(m.group(1)), n) for n in os.listdir(path)
                   for m in [re.fullmatch(r"step_(\d{8,})", n)] if m
                   and os.path.isfile(os.path.join(path, n, CHECKPOINT_FILE)))
    if not steps:
        raise SystemExit(f"{path} holds no complete checkpoint (no state.h5, latest/, ckpt/ or step_<N>/state.h5)")
    return os.path.join(path, steps[-1][1], CHECKPOINT_FILE)


def _text(v):
    return v.decode("utf-8") if isinstance(v, (bytes, np.bytes_)) else str(v)


def _natural(name):
    """layers.2 before layers.10."""
    return [int(t) if t.isdigit() else t for t in re.split(r"(\d+)", name)]


def verify(f, file):
    """What ExaMoE checks on load, minus the model's shapes: raises ValueError."""
    at = dict(f.attrs)
    if int(at.get("format_version", -1)) != FORMAT_VERSION:
        raise ValueError(f"{file}: format_version {at.get('format_version')}, this script reads {FORMAT_VERSION}")
    if int(at["meta_checksum"]) != meta_checksum(at):
        raise ValueError(f"{file}: the attributes on / do not match meta_checksum: the file is corrupt")
    chunk = int(at["chunk_elements"]) if "chunk_elements" in at else 0  # 0: written before chunk checksums
    entries, chunk_entries = [], []
    for group in (MODEL, EXP_AVG, EXP_AVG_SQ, STATE):
        if group not in f:
            continue
        for name, ds in f[group].items():
            path = f"/{group}/{name}"
            sums = chunk_checksums(ds[()], chunk if chunk > 0 else 1 << 22)
            c = sum(sums) & ((1 << 64) - 1)
            if c != int(ds.attrs["checksum"]):
                raise ValueError(f"{file}: {path} reads back with checksum {c:016x} but was written "
                                 f"with {int(ds.attrs['checksum']):016x}: the file is corrupt")
            entries.append((path, c))
            if chunk > 0:
                stored = [int(x) for x in np.atleast_1d(ds.attrs.get("chunk_checksums", np.zeros(0, np.uint64)))]
                for k, (got, want) in enumerate(zip(sums, stored)):
                    if got != want:
                        raise ValueError(f"{file}: {path} chunk {k} reads back with checksum {got:016x} but was "
                                         f"written with {want:016x}: the file is corrupt")
                if len(stored) != len(sums):
                    raise ValueError(f"{file}: {path} has {len(stored)} chunk checksums, not {len(sums)}")
                chunk_entries.append((path, sums))
    if merkle_root(sorted(entries)) != int(at["merkle_root"]):
        raise ValueError(f"{file}: the Merkle root over the dataset checksums does not match: a dataset was "
                         "added, removed or altered")
    if chunk > 0:
        leaves = [(f"{p}#{k}", c) for p, sums in sorted(chunk_entries) for k, c in enumerate(sums)]
        if merkle_root(leaves) != int(at["chunk_merkle_root"]):
            raise ValueError(f"{file}: the Merkle root over the chunk checksums does not match")


def read_arrays(path, optim=False, check=True):
    """({name: float32 ndarray}, info) of a checkpoint; `optim` adds the
    moments as "optim.exp_avg.<name>" / "optim.exp_avg_sq.<name>"."""
    file = resolve_checkpoint(path)
    with h5py.File(file, "r") as f:
        if check:
            verify(f, file)
        groups = [(MODEL, "")]
        if optim:
            if EXP_AVG not in f:
                raise ValueError(f"{file} holds no optimizer state (no /{EXP_AVG}); leave out --optim")
            groups += [(EXP_AVG, "optim.exp_avg."), (EXP_AVG_SQ, "optim.exp_avg_sq.")]
        arrays = {}
        for group, prefix in groups:
            for name in sorted(f[group], key=_natural):
                arrays[prefix + name] = np.asarray(f[group][name][()], dtype=np.float32)
        at = f.attrs
        info = {"file": file, "step": int(at["step"]), "config": json.loads(_text(at["config_json"])),
                "deck": _text(at["deck"]), "layout": json.loads(_text(at["layout"]))}
    return arrays, info


def load_checkpoint(path, optim=False, check=True):
    """(state_dict, info): the checkpoint's tensors as torch float32 tensors."""
    import torch  # only here: the checksum helpers need no torch
    from collections import OrderedDict
    arrays, info = read_arrays(path, optim, check)
    return OrderedDict((k, torch.from_numpy(v)) for k, v in arrays.items()), info


def peft_adapters(sd, config):
    """(state_dict, adapter_config) in PEFT's names from an ExaMoE state_dict
    holding "<W>.lora_a" / "<W>.lora_b" tensors."""
    from collections import OrderedDict
    lora = config.get("lora", {})
    rank = int(lora.get("rank", 0))
    if rank <= 0:
        raise ValueError("the checkpoint's run has no adapters (lora.rank = 0)")
    out = OrderedDict()
    targets = set()
    for name in sorted(sd, key=_natural):
        if not name.endswith(".lora_a"):
            continue
        stem = name[: -len(".lora_a")]
        a, b = sd[name], sd[stem + ".lora_b"]
        if stem == "embed":
            # PEFT's nn.Embedding LoRA: delta W = (lora_embedding_B @ lora_embedding_A)^T * s with
            # A [r, V], B [d, r]; ExaMoE's delta W = s B A with B [V, r], A [r, d].
            out["base_model.model.embed.lora_embedding_A"] = b.t().contiguous()
            out["base_model.model.embed.lora_embedding_B"] = a.t().contiguous()
            targets.add("embed")
            continue
        if a.dim() == 2:
            modules = [(stem, a, b)]
        else:  # stacked shared or routed experts [S, r, in] / [S, out, r]
            head, _, leaf = stem.rpartition(".")
            modules = [(f"{head}.{s}.{leaf}", a[s], b[s]) for s in range(a.shape[0])]
        for module, am, bm in modules:
            out[f"base_model.model.{module}.lora_A.weight"] = am.contiguous()
            out[f"base_model.model.{module}.lora_B.weight"] = bm.contiguous()
            targets.add(module.rpartition(".")[2])
    if not out:
        raise ValueError("the checkpoint holds no adapters (*.lora_a tensors)")
    cfg = {"peft_type": "LORA", "task_type": "CAUSAL_LM", "r": rank, "lora_alpha": float(lora.get("alpha", 16.0)),
           "lora_dropout": 0.0, "bias": "none", "fan_in_fan_out": False, "target_modules": sorted(targets),
           "inference_mode": True}
    return out, cfg


def main(argv=None):
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0],
                                 formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("checkpoint", help="run directory, checkpoint directory, step directory or state.h5")
    ap.add_argument("-o", "--out", help="write the state_dict with torch.save to this file")
    ap.add_argument("--optim", action="store_true", help="include the AdamW moments")
    ap.add_argument("--config-out", help="write the run's resolved configuration (JSON) to this file")
    ap.add_argument("--no-verify", action="store_true", help="skip the checksum and Merkle-root verification")
    ap.add_argument("--peft", metavar="DIR", help="write the LoRA adapters as PEFT's adapter_model.bin and "
                    "adapter_config.json into DIR")
    a = ap.parse_args(argv)
    try:
        sd, info = load_checkpoint(a.checkpoint, a.optim, not a.no_verify)
    except ValueError as e:
        raise SystemExit(f"ckpt_to_torch: {e}")
    if a.peft:
        import torch
        try:
            psd, pcfg = peft_adapters(sd, info["config"])
        except ValueError as e:
            raise SystemExit(f"ckpt_to_torch: {info['file']}: {e}")
        os.makedirs(a.peft, exist_ok=True)
        torch.save(psd, os.path.join(a.peft, "adapter_model.bin"))
        with open(os.path.join(a.peft, "adapter_config.json"), "w") as f:
            json.dump(pcfg, f, indent=1)
        print(f"{info['file']}: {len(psd) // 2} LoRA modules (r {pcfg['r']}, alpha {pcfg['lora_alpha']:g}) -> {a.peft}")
    if a.out:
        import torch
        torch.save(sd, a.out)
    if a.config_out:
        with open(a.config_out, "w") as f:
            json.dump(info["config"], f, indent=1)
    n = sum(t.numel() for k, t in sd.items() if not k.startswith("optim."))
    print(f"{info['file']}: step {info['step']}, {len(sd)} tensors, {n} parameters"
          f"{' (verified)' if not a.no_verify else ''}{', saved to ' + a.out if a.out else ''}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
