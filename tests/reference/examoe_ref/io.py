"""HDF5 I/O for the reference: ExaMoE checkpoints in, named tensors out."""

import h5py
import numpy as np
import torch

from .config import param_shapes


def load_weights(path, cfg, dtype=torch.float64, group="model"):
    """Parameters from the datasets /<group>/<global name> of an HDF5 file
    (an ExaMoE checkpoint file, fp32). The set of names and every shape must
    be exactly config.param_shapes(cfg); returns {name: tensor of dtype}."""
    want = param_shapes(cfg)
    got = {}
    with h5py.File(path, "r") as f:
        if group not in f:
            raise ValueError(f"{path}: no group /{group}")
        f[group].visititems(lambda n, obj: got.__setitem__(n.replace("/", "."), obj[()])
                            if isinstance(obj, h5py.Dataset) else None)
    missing = [n for n in want if n not in got]
    extra = sorted(n for n in got if n not in want)
    bad = [f"{n} {tuple(got[n].shape)} (want {want[n]})" for n in want
           if n in got and tuple(got[n].shape) != tuple(want[n])]
    if missing or extra or bad:
        raise ValueError(f"{path}: /{group} does not match the config: missing {missing}, "
                         f"unexpected {extra}, wrong shape {bad}")
    return {n: torch.from_numpy(np.asarray(got[n])).to(dtype) for n in want}


def save_tensors(path, tensors, mode="w"):
    """Write {name: tensor | array | number} to HDF5; a '/' in a name makes
    groups ("grads/embed.weight" -> group grads, dataset embed.weight)."""
    with h5py.File(path, mode) as f:
        for name, t in tensors.items():
            if isinstance(t, torch.Tensor):
                t = t.detach().cpu().numpy()
            f.create_dataset(name, data=np.asarray(t))


def load_batch(path):
    """int32 datasets "inputs" [B,T] and "targets" [B,T] -> two int64 tensors."""
    with h5py.File(path, "r") as f:
        x = torch.from_numpy(np.asarray(f["inputs"][()]).astype(np.int64))
        y = torch.from_numpy(np.asarray(f["targets"][()]).astype(np.int64))
    if x.ndim != 2 or x.shape != y.shape:
        raise ValueError(f"{path}: inputs {tuple(x.shape)} and targets {tuple(y.shape)} must both be [B,T]")
    return x, y
