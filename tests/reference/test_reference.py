"""Self-tests of the PyTorch reference. Run from tests/reference with
    /usr/bin/python3 -m unittest -v
(ctest: reference.selftest)."""

import json
import math
import os
import subprocess
import sys
import tempfile
import unittest

import h5py
import numpy as np
import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

from examoe_ref import Config, expert_capacity, forward, is_moe_layer, param_shapes, random_weights, route  # noqa: E402
from examoe_ref.io import load_weights, save_tensors  # noqa: E402
from examoe_ref.model import apply_rope, moe, rope_cos_sin, swiglu  # noqa: E402

torch.set_num_threads(1)
F64 = torch.float64

TINY = dict(vocab_size=11, d_model=8, n_layers=2, n_heads=2, n_kv_heads=2, d_ff=12, seq_len=8,
            n_experts=4, top_k=2, d_expert=6, moe_every=1, n_shared_experts=0, capacity_factor=0.0,
            norm_topk=True, aux_coef=0.1, z_coef=0.01, tie_embeddings=False)


def tiny(**kw):
    d = dict(TINY)
    d.update(kw)
    return Config(**d)


def batch(cfg, B=2, T=5, seed=0):
    g = torch.Generator().manual_seed(seed)
    return (torch.randint(0, cfg.vocab_size, (B, T), generator=g),
            torch.randint(0, cfg.vocab_size, (B, T), generator=g))


def topk_gap(p, cfg, x):
    """Smallest gap between the k-th and (k+1)-th router probability, over all
    tokens of all MoE layers (how far the routing is from a flip)."""
    import examoe_ref.model as m
    gaps, orig = [], m.route

    def spy(probs, k, norm, cap):
        if k < probs.shape[1]:
            s = probs.sort(dim=-1, descending=True).values
            gaps.append((s[:, k - 1] - s[:, k]).min().item())
        return orig(probs, k, norm, cap)
    m.route = spy
    try:
        with torch.no_grad():
            forward(p, cfg, x)
    finally:
        m.route = orig
    return min(gaps, default=math.inf)


class Rope(unittest.TestCase):
    def test_hand_case(self):
        # hd = 4, theta = 100: inv_freq = [1, 1/10]; pairs (0,2) and (1,3).
        cos, sin = rope_cos_sin(3, 4, 100.0, F64)
        self.assertTrue(torch.allclose(cos[1], torch.tensor([math.cos(1.0), math.cos(0.1)], dtype=F64)))
        self.assertTrue(torch.allclose(sin[2], torch.tensor([math.sin(2.0), math.sin(0.2)], dtype=F64)))
        x = torch.tensor([1.0, 2.0, 3.0, 4.0], dtype=F64).expand(1, 3, 1, 4)
        y = apply_rope(x, cos, sin)[0, :, 0]
        self.assertTrue(torch.equal(y[0], x[0, 0, 0]))  # position 0: identity
        c1, s1, c2, s2 = math.cos(1), math.sin(1), math.cos(0.1), math.sin(0.1)
        want = torch.tensor([1 * c1 - 3 * s1, 2 * c2 - 4 * s2, 3 * c1 + 1 * s1, 4 * c2 + 2 * s2], dtype=F64)
        self.assertTrue(torch.allclose(y[1], want, rtol=0, atol=1e-15))


class Routing(unittest.TestCase):
    def test_topk_ties_go_to_lower_index(self):
        probs = torch.tensor([[0.1, 0.3, 0.3, 0.3], [0.4, 0.1, 0.1, 0.4]], dtype=F64)
        idx, gates, keep, counts = route(probs, 2, True, 0)
        self.assertEqual(idx.tolist(), [[1, 2], [0, 3]])
        self.assertTrue(torch.allclose(gates, torch.full((2, 2), 0.5, dtype=F64)))
        self.assertTrue(keep.all())
        self.assertEqual(counts.tolist(), [1, 1, 1, 1])

    def test_capacity_drops_in_token_then_slot_order(self):
        # Picks: t0 -> (0,1), t1 -> (1,0), t2 -> (0,2), t3 -> (2,0).
        probs = torch.tensor([[.6, .3, .1], [.3, .6, .1], [.6, .1, .3], [.3, .1, .6]], dtype=F64)
        cfg = tiny(n_experts=3, capacity_factor=0.75)
        C = expert_capacity(cfg, 4)  # ceil(0.75 * 4 * 2 / 3) = 2
        self.assertEqual(C, 2)
        idx, gates, keep, counts = route(probs, 2, False, C)
        self.assertEqual(idx.tolist(), [[0, 1], [1, 0], [0, 2], [2, 0]])
        # Expert 0 is wanted by (0,0), (1,1), (2,0), (3,1) in (n, j) order: the
        # first two stay, so t1's second slot beats t2's first slot.
        self.assertEqual(keep.tolist(), [[True, True], [True, True], [False, True], [True, False]])
        self.assertEqual(counts.tolist(), [4, 2, 2])  # routed, before dropping
        self.assertTrue(torch.equal(gates, probs.gather(1, idx)))  # norm_topk off
        self.assertEqual(expert_capacity(tiny(capacity_factor=0.0), 4), 0)
        self.assertEqual(expert_capacity(tiny(n_experts=3, capacity_factor=1.0), 4), 3)  # ceil(8/3)

    def test_moe_output_aux_and_z(self):
        # The MoE layer by hand: kept assignments weighted by the renormalised
        # gates, dropped ones contribute 0, shared experts added ungated.
        cfg = tiny(n_experts=3, capacity_factor=0.75, n_shared_experts=2)
        p = random_weights(cfg, seed=3, std=0.7, dtype=F64)
        pre = "layers.0.moe."
        x = torch.randn(4, cfg.d_model, dtype=F64, generator=torch.Generator().manual_seed(5))
        y, aux, z, st = moe(x, p, pre, cfg)
        logits = x @ p[pre + "router.weight"].t()
        probs = torch.softmax(logits, -1)
        idx, _, keep, counts = route(probs, 2, True, 2)
        want = torch.zeros_like(x)
        for n in range(4):
            top = probs[n, idx[n]]
            for j in range(2):
                if keep[n, j]:
                    e = idx[n, j]
                    h = torch.nn.functional.silu(p[pre + "experts.w1"][e] @ x[n]) * (p[pre + "experts.w3"][e] @ x[n])
                    want[n] += top[j] / top.sum() * (p[pre + "experts.w2"][e] @ h)
            for s in range(2):
                want[n] += swiglu(x[n], p[pre + "shared.w1"][s], p[pre + "shared.w3"][s], p[pre + "shared.w2"][s])
        self.assertTrue(torch.allclose(y, want, rtol=1e-12, atol=1e-14))
        f = counts.double() / 8
        self.assertAlmostEqual(aux.item(), 0.1 * 3 * (f * probs.mean(0)).sum().item(), places=14)
        self.assertAlmostEqual(z.item(), 0.01 * (torch.logsumexp(logits, -1) ** 2).mean().item(), places=14)
        self.assertEqual(st["kept"].tolist(), [min(c, 2) for c in counts.tolist()])


class Structure(unittest.TestCase):
    def test_moe_every(self):
        self.assertEqual([is_moe_layer(tiny(n_layers=4, moe_every=1), i) for i in range(4)], [True] * 4)
        self.assertEqual([is_moe_layer(tiny(n_layers=4, moe_every=2), i) for i in range(4)],
                         [False, True, False, True])
        self.assertEqual([is_moe_layer(tiny(n_layers=4, moe_every=3), i) for i in range(4)],
                         [False, False, True, False])
        self.assertFalse(any(is_moe_layer(tiny(moe_every=0), i) for i in range(2)))

    def test_names_and_shapes(self):
        s = param_shapes(tiny(n_layers=2, moe_every=2, n_shared_experts=3, n_kv_heads=1, tie_embeddings=True))
        self.assertEqual(s["layers.0.mlp.w2"], (8, 12))
        self.assertEqual(s["layers.1.attn.wk.weight"], (4, 8))
        self.assertEqual(s["layers.1.moe.experts.w2"], (4, 8, 6))
        self.assertEqual(s["layers.1.moe.shared.w1"], (3, 6, 8))
        self.assertEqual(s["layers.1.moe.shared.w2"], (3, 8, 6))
        self.assertNotIn("lm_head.weight", s)
        self.assertNotIn("layers.0.moe.router.weight", s)
        self.assertNotIn("layers.1.moe.shared.w1", param_shapes(tiny()))

    def test_gqa_equals_mha_with_repeated_kv_heads(self):
        gqa = tiny(n_heads=4, n_kv_heads=2, d_model=16)
        mha = tiny(n_heads=4, n_kv_heads=4, d_model=16)
        p = random_weights(gqa, seed=1, std=0.5, dtype=F64)
        q = dict(p)
        hd = gqa.head_dim
        for i in range(gqa.n_layers):
            for w in ("wk", "wv"):
                name = f"layers.{i}.attn.{w}.weight"
                q[name] = p[name].view(2, hd, -1).repeat_interleave(2, dim=0).reshape(4 * hd, -1)
        x, y = batch(gqa, T=7)
        a, b = forward(p, gqa, x, y), forward(q, mha, x, y)
        self.assertTrue(torch.allclose(a["logits"], b["logits"], rtol=1e-13, atol=1e-13))
        self.assertAlmostEqual(a["loss"].item(), b["loss"].item(), places=13)

    def test_causal(self):
        cfg = tiny(n_kv_heads=1)
        p = random_weights(cfg, seed=2, std=0.5, dtype=F64)
        x, _ = batch(cfg, B=1, T=6)
        x2 = x.clone()
        x2[0, 4] = (x[0, 4] + 1) % cfg.vocab_size
        # Routing is over the micro-batch but per token, so earlier positions
        # see nothing of later ones (dropless); equal up to gemm blocking.
        a, b = forward(p, cfg, x)["logits"], forward(p, cfg, x2)["logits"]
        self.assertTrue(torch.allclose(a[0, :4], b[0, :4], rtol=1e-13, atol=1e-14))
        self.assertFalse(torch.allclose(a[0, 4:], b[0, 4:]))


def gradcheck_model(test, cfg, accept=lambda p, x: True):
    """torch.autograd.gradcheck of (ce, aux, z) with respect to every
    parameter, float64, at the first seed whose routing is at least 1e-3 from
    a top-k flip (so the finite differences see a smooth function) and that
    `accept` takes."""
    x, y = batch(cfg, B=2, T=4)
    for seed in range(40):
        p = random_weights(cfg, seed=seed, std=0.5, norm_noise=0.2, dtype=F64, router_std=1.0)
        if topk_gap(p, cfg, x) > 1e-3 and accept(p, x):
            break
    else:
        test.fail("no seed with a stable top-k")
    names = list(p)

    def f(*ts):
        o = forward(dict(zip(names, ts)), cfg, x, y)
        return o["ce"], o["aux"], o["z"]
    ts = tuple(p[n].clone().requires_grad_(True) for n in names)
    test.assertTrue(torch.autograd.gradcheck(f, ts, eps=1e-6, atol=1e-7, rtol=1e-5))


class Gradients(unittest.TestCase):
    def test_gradcheck_dropless_gqa_shared_dense(self):
        # layer 0 dense, layer 1 MoE with a shared expert; GQA; untied head.
        gradcheck_model(self, tiny(n_kv_heads=1, moe_every=2, n_shared_experts=1))

    def test_gradcheck_capacity_tied(self):
        cfg = tiny(moe_every=1, capacity_factor=0.75, tie_embeddings=True, norm_topk=False, n_layers=1)

        def drops(p, x):
            st = forward(p, cfg, x)["stats"][0]
            return int(st["kept"].sum()) < int(st["routed"].sum())
        gradcheck_model(self, cfg, drops)


def write_case(d, cfg, seed, B=2, T=6):
    deck = cfg.to_dict()
    deck["optim"] = {"lr": 1e-2, "beta1": 0.9, "beta2": 0.95, "eps": 1e-8, "weight_decay": 0.1,
                     "grad_clip": 0.0, "warmup_steps": 0, "schedule": "constant"}
    with open(os.path.join(d, "cfg.json"), "w") as f:
        json.dump(deck, f)
    p = random_weights(cfg, seed=seed, std=0.3, norm_noise=0.1, dtype=torch.float32, router_std=1.0)
    save_tensors(os.path.join(d, "ckpt.h5"), {"model/" + n: t for n, t in p.items()})
    x, y = batch(cfg, B=B, T=T, seed=seed)
    save_tensors(os.path.join(d, "batch.h5"), {"inputs": x.int(), "targets": y.int()})


def run_cli(d, out, *extra):
    cmd = [sys.executable, os.path.join(HERE, "run_reference.py"), "--config", os.path.join(d, "cfg.json"),
           "--weights", os.path.join(d, "ckpt.h5"), "--batch", os.path.join(d, "batch.h5"),
           "--out", os.path.join(d, out), *extra]
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        raise AssertionError(f"{' '.join(cmd)} failed:\n{r.stdout}\n{r.stderr}")
    return h5py.File(os.path.join(d, out), "r")


def manual_adamw(params, cfg, x, y, steps, lr, b1, b2, eps, wd):
    """AdamW written out (decoupled decay on ndim >= 2 tensors only)."""
    p = {n: t.detach().clone() for n, t in params.items()}
    m = {n: torch.zeros_like(t) for n, t in p.items()}
    v = {n: torch.zeros_like(t) for n, t in p.items()}
    losses = []
    for s in range(1, steps + 1):
        q = {n: t.clone().requires_grad_(True) for n, t in p.items()}
        o = forward(q, cfg, x, y)
        o["loss"].backward()
        losses.append(o["loss"].item())
        for n in p:
            g = q[n].grad
            if p[n].ndim >= 2:
                p[n] = p[n] * (1 - lr * wd)
            m[n] = b1 * m[n] + (1 - b1) * g
            v[n] = b2 * v[n] + (1 - b2) * g * g
            denom = v[n].sqrt() / math.sqrt(1 - b2 ** s) + eps
            p[n] = p[n] - lr / (1 - b1 ** s) * m[n] / denom
    return losses, p


CLI_CASES = {
    "dropless": dict(),
    "capacity": dict(capacity_factor=0.75),
    "gqa": dict(n_heads=4, n_kv_heads=2, d_model=16),
    "shared": dict(n_shared_experts=2),
    "tied": dict(tie_embeddings=True),
    "dense_layer": dict(n_layers=3, moe_every=2),
}


class Cli(unittest.TestCase):
    def check_case(self, name, kw):
        cfg = tiny(**kw)
        with tempfile.TemporaryDirectory() as d:
            write_case(d, cfg, seed=7)
            steps = 3
            with run_cli(d, "out64.h5", "--dtype", "float64", "--adamw-steps", str(steps)) as f:
                p = load_weights(os.path.join(d, "ckpt.h5"), cfg, F64)
                with h5py.File(os.path.join(d, "batch.h5"), "r") as b:
                    x, y = torch.from_numpy(b["inputs"][()]).long(), torch.from_numpy(b["targets"][()]).long()
                    self.assertEqual(b["inputs"].dtype, np.int32)
                q = {n: t.clone().requires_grad_(True) for n, t in p.items()}
                o = forward(q, cfg, x, y)
                o["loss"].backward()
                np.testing.assert_allclose(f["logits"][()], o["logits"].detach().numpy(), rtol=1e-12, atol=1e-14)
                for k in ("loss", "ce", "aux", "z"):
                    self.assertEqual(f[k].shape, ())
                    self.assertAlmostEqual(float(f[k][()]), o[k].item(), places=12)
                self.assertAlmostEqual(float(f["loss"][()]),
                                       float(f["ce"][()] + f["aux"][()] + f["z"][()]), places=12)
                self.assertEqual(set(f["grads"].keys()), set(param_shapes(cfg)))
                for n, shape in param_shapes(cfg).items():
                    self.assertEqual(f["grads/" + n].shape, shape)
                    np.testing.assert_allclose(f["grads/" + n][()], q[n].grad.numpy(), rtol=1e-10, atol=1e-14,
                                               err_msg=n)
                    self.assertTrue(np.any(f["grads/" + n][()] != 0), n)
                losses, final = manual_adamw(p, cfg, x, y, steps, 1e-2, 0.9, 0.95, 1e-8, 0.1)
                np.testing.assert_allclose(f["adamw/losses"][()], losses, rtol=1e-12)
                self.assertAlmostEqual(float(f["adamw/losses"][0]), float(f["loss"][()]), places=12)
                self.assertLess(losses[-1], losses[0])
                for n in param_shapes(cfg):
                    np.testing.assert_allclose(f["adamw/final/" + n][()], final[n].numpy(), rtol=1e-9, atol=1e-12,
                                               err_msg=n)
                ref = {k: f[k][()] for k in ("logits", "loss")}
                ref.update({n: f["grads/" + n][()] for n in param_shapes(cfg)})
            # fp32 run of the same case: close to the float64 one.
            with run_cli(d, "out32.h5") as f:
                self.assertEqual(f["logits"].dtype, np.float32)
                np.testing.assert_allclose(f["logits"][()], ref["logits"], rtol=1e-4, atol=1e-5)
                self.assertAlmostEqual(float(f["loss"][()]), float(ref["loss"]), delta=1e-5 * abs(ref["loss"]))
                for n in param_shapes(cfg):
                    g = ref[n]
                    np.testing.assert_allclose(f["grads/" + n][()], g, rtol=0, atol=1e-4 * np.abs(g).max(),
                                               err_msg=n)


for _name, _kw in CLI_CASES.items():
    setattr(Cli, f"test_roundtrip_{_name}", lambda self, n=_name, kw=_kw: self.check_case(n, kw))


class Io(unittest.TestCase):
    def test_weights_must_match_config(self):
        cfg = tiny()
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "w.h5")
            p = random_weights(cfg, dtype=torch.float32)
            p["layers.0.attn.wq.weight"] = p["layers.0.attn.wq.weight"][:4]
            del p["norm.weight"]
            p["extra"] = torch.zeros(1)
            save_tensors(path, {"model/" + n: t for n, t in p.items()})
            with self.assertRaises(ValueError) as e:
                load_weights(path, cfg)
            msg = str(e.exception)
            for s in ("norm.weight", "extra", "layers.0.attn.wq.weight (4, 8)"):
                self.assertIn(s, msg)


if __name__ == "__main__":
    unittest.main()
