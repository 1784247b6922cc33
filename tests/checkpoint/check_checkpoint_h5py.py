#!/usr/bin/env python3
"""Checks an ExaMoE checkpoint against the checkpoint contract (docs/architecture.md) with h5py alone.

Runs the fixture writer (under mpiexec, sharded), then opens the newest
checkpoint with h5py and checks, independently of the C++ code:
  * the directory layout (step_<NNNNNNNN>/state.h5, `latest` symlink);
  * every tensor name and [out, in] shape that docs/architecture.md lists, derived here
    from the resolved configuration stored in the file, in /model and both
    /optim groups, all float32;
  * the attributes on "/" (format version, step, tokens, cursor, RNG and LR
    state, deck, configuration, layout, Merkle root);
  * each dataset's "checksum" attribute, recomputed with numpy from the
    documented formula (kernels/checksum.hpp), the Merkle root over them and
    the metadata checksum (XXH64 in pure Python, docs/checkpoint-format.md);
  * with PyTorch: a module tree written from docs/architecture.md takes /model through
    load_state_dict(strict=True), i.e. without renames or transposes, and its
    nn.Linear layers compute x @ W^T with the stored [out, in] matrices.
Exit 77 (skipped) when h5py or numpy is missing.
"""
import argparse
import importlib.util
import json
import os
import shlex
import shutil
import subprocess
import sys

try:
    import h5py
    import numpy as np
except ImportError as e:  # pragma: no cover
    print(f"skipped: {e} (Debian: python3-h5py)")
    sys.exit(77)

# The documented checksums (docs/checkpoint-format.md), as the user-facing
# converter computes them: numpy for the datasets, XXH64 in pure Python.
sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "scripts"))
from ckpt_to_torch import checksum, chunk_checksums, merkle_root, meta_checksum, verify  # noqa: E402


def expected_shapes(cfg):
    """Contract names and shapes, from the PyTorch reference's table (loaded by
    path: the examoe_ref package itself imports torch, which this check does
    not need)."""
    path = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "reference", "examoe_ref", "config.py")
    spec = importlib.util.spec_from_file_location("examoe_ref_config", path)
    ref = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = ref  # dataclasses look their module up by name
    spec.loader.exec_module(ref)
    return dict(ref.param_shapes(ref.Config.from_dict(cfg)))


def text(v):
    return v.decode("utf-8") if isinstance(v, (bytes, np.bytes_)) else str(v)


def torch_check(cfg, tensors):
    try:
        import torch
        from torch import nn
    except ImportError:
        print("PyTorch not installed: skipping the load_state_dict check")
        return
    m, moe = cfg["model"], cfg["moe"]
    V, d, L, H = m["vocab_size"], m["d_model"], m["n_layers"], m["n_heads"]
    Hkv = m["n_kv_heads"] or H
    hd = d // H
    E, F, S = moe["n_experts"], moe["d_expert"], moe["n_shared_experts"]

    class Norm(nn.Module):
        def __init__(self):
            super().__init__()
            self.weight = nn.Parameter(torch.ones(d))

    class Attn(nn.Module):
        def __init__(self):
            super().__init__()
            self.wq = nn.Linear(d, H * hd, bias=False)
            self.wk = nn.Linear(d, Hkv * hd, bias=False)
            self.wv = nn.Linear(d, Hkv * hd, bias=False)
            self.wo = nn.Linear(H * hd, d, bias=False)

    class Experts(nn.Module):
        def __init__(self, n):
            super().__init__()
            self.w1 = nn.Parameter(torch.empty(n, F, d))
            self.w3 = nn.Parameter(torch.empty(n, F, d))
            self.w2 = nn.Parameter(torch.empty(n, d, F))

    class MoE(nn.Module):
        def __init__(self):
            super().__init__()
            self.router = nn.Linear(d, E, bias=False)
            self.experts = Experts(E)
            if S > 0:
                self.shared = Experts(S)

    class Mlp(nn.Module):
        def __init__(self):
            super().__init__()
            self.w1 = nn.Parameter(torch.empty(m["d_ff"], d))
            self.w3 = nn.Parameter(torch.empty(m["d_ff"], d))
            self.w2 = nn.Parameter(torch.empty(d, m["d_ff"]))

    class Block(nn.Module):
        def __init__(self, i):
            super().__init__()
            self.attn_norm = Norm()
            self.attn = Attn()
            self.ffn_norm = Norm()
            if moe["moe_every"] > 0 and (i + 1) % moe["moe_every"] == 0:
                self.moe = MoE()
            else:
                self.mlp = Mlp()

    class Model(nn.Module):
        def __init__(self):
            super().__init__()
            self.embed = nn.Embedding(V, d)
            self.layers = nn.ModuleList([Block(i) for i in range(L)])
            self.norm = Norm()
            if not m["tie_embeddings"]:
                self.lm_head = nn.Linear(d, V, bias=False)

    model = Model()
    state = {k: torch.from_numpy(v) for k, v in tensors.items()}
    model.load_state_dict(state, strict=True)  # raises on any name or shape mismatch
    # nn.Linear computes x W^T with W = the stored [out, in] matrix, as is.
    x = torch.randn(3, d, dtype=torch.float32)
    w = tensors["layers.0.attn.wq.weight"]
    ref = x.numpy().astype(np.float64) @ w.astype(np.float64).T
    got = model.layers[0].attn.wq(x).detach().numpy()
    assert np.allclose(got, ref, rtol=1e-5, atol=1e-6), "wq does not act as x @ W^T"
    print(f"PyTorch {torch.__version__}: load_state_dict(strict=True) took all {len(state)} tensors")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--writer", required=True)
    ap.add_argument("--launcher", default="")
    ap.add_argument("--workdir", required=True)
    a = ap.parse_args()

    shutil.rmtree(a.workdir, ignore_errors=True)
    os.makedirs(a.workdir)
    ckpt = os.path.join(a.workdir, "ckpt")
    subprocess.run(shlex.split(a.launcher) + [a.writer, ckpt], check=True)

    step_dir = os.path.join(ckpt, "step_00000003")
    assert os.path.islink(os.path.join(ckpt, "latest")), "latest is not a symlink"
    assert os.readlink(os.path.join(ckpt, "latest")) == "step_00000003"
    assert not [n for n in os.listdir(ckpt) if n.startswith(".")], os.listdir(ckpt)
    path = os.path.join(ckpt, "latest", "state.h5")

    with h5py.File(path, "r") as f:
        at = f.attrs
        assert int(at["format_version"]) == 1
        assert int(at["step"]) == 3 and int(at["tokens_seen"]) == 192 and int(at["data_cursor"]) == 12
        assert list(at["rng_state"]) == [1, 2, 3]
        assert float(at["lr_schedule.lr"]) == 1e-3 and float(at["lr_schedule.warmup_steps"]) == 2
        assert text(at["deck"]).startswith("# checkpoint fixture deck")
        cfg = json.loads(text(at["config_json"]))
        layout = json.loads(text(at["layout"]))
        assert set(layout) >= {"world_size", "pp", "dp", "cp", "tp", "ep", "zero"}, layout
        assert int(at["meta_checksum"]) == meta_checksum(at), "meta_checksum does not match the attributes"

        want = expected_shapes(cfg)
        tensors = {}
        for group in ("model", "optim/exp_avg", "optim/exp_avg_sq"):
            g = f[group]
            assert set(g.keys()) == set(want), f"/{group}: {sorted(set(g.keys()) ^ set(want))}"
            for name, shape in want.items():
                ds = g[name]
                assert ds.shape == shape, f"/{group}/{name}: {ds.shape} != {shape}"
                assert ds.dtype == np.dtype("<f4"), f"/{group}/{name}: {ds.dtype}"
                arr = ds[()]
                c = checksum(arr)
                assert int(ds.attrs["checksum"]) == c, f"/{group}/{name}: checksum {ds.attrs['checksum']} != {c}"
                if group == "model":
                    tensors[name] = arr
        entries = sorted((f"/{g}/{n}", int(f[g][n].attrs["checksum"]))
                         for g in ("model", "optim/exp_avg", "optim/exp_avg_sq", "state") if g in f for n in f[g])
        assert int(at["merkle_root"]) == merkle_root(entries), "Merkle root does not match the dataset checksums"
        # Per-chunk checksums: chunk_elements on /, one checksum per chunk of
        # every dataset, adding up to its checksum, under chunk_merkle_root.
        chunk = int(at["chunk_elements"])
        assert chunk > 0, chunk
        for g in ("model", "optim/exp_avg", "optim/exp_avg_sq"):
            for name in want:
                ds = f[g][name]
                sums = chunk_checksums(ds[()], chunk)
                assert [int(x) for x in np.atleast_1d(ds.attrs["chunk_checksums"])] == sums, f"/{g}/{name} chunks"
        verify(f, path)  # ckpt_to_torch's check, chunk Merkle root included
        assert np.all(f["model/norm.weight"][()] == 1.0)
        assert np.all(f["optim/exp_avg/embed.weight"][()] == 0.5)
        print(f"h5py {h5py.__version__}: {3 * len(want)} datasets with contract names, shapes and checksums")
    torch_check(cfg, tensors)
    return 0


if __name__ == "__main__":
    sys.exit(main())
