"""bench_torch.py's fast model is the reference model: same losses and the
same gradients as examoe_ref.model.forward (float64), for every option the
benchmark may meet. Run from tests/reference with
    /usr/bin/python3 -m unittest -v test_bench_torch
(part of ctest's reference.selftest)."""

import json
import os
import subprocess
import sys
import tempfile
import unittest

import torch

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)

import bench_torch as bt  # noqa: E402
from examoe_ref import Config, forward, random_weights  # noqa: E402

torch.set_num_threads(1)

BASE = dict(vocab_size=13, d_model=16, n_layers=2, n_heads=4, n_kv_heads=4, d_ff=12, seq_len=8,
            n_experts=4, top_k=2, d_expert=6, moe_every=1, n_shared_experts=0, capacity_factor=0.0,
            norm_topk=True, aux_coef=0.1, z_coef=0.01, tie_embeddings=False)

CASES = {
    "dropless": {},
    "capacity": dict(capacity_factor=0.75),
    "gqa": dict(n_kv_heads=2),
    "shared": dict(n_shared_experts=2),
    "tied": dict(tie_embeddings=True),
    "dense_layer": dict(n_layers=3, moe_every=2),
    "unnormalised_top1": dict(top_k=1, norm_topk=False),
}


class FastEqualsReference(unittest.TestCase):
    def check(self, **kw):
        d = dict(BASE)
        d.update(kw)
        cfg = Config(**d)
        p = random_weights(cfg, seed=3, std=0.3, norm_noise=0.1, dtype=torch.float64, router_std=1.0)
        g = torch.Generator().manual_seed(5)
        B, T = 3, cfg.seq_len
        x = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
        y = torch.randint(0, cfg.vocab_size, (B, T), generator=g)
        qa = {n: t.clone().requires_grad_(True) for n, t in p.items()}
        qb = {n: t.clone().requires_grad_(True) for n, t in p.items()}
        fast = bt.forward(qa, cfg, bt.Statics(cfg, T, torch.float64), x, y)
        slow = forward(qb, cfg, x, y)
        for i, name in enumerate(("loss", "ce", "aux", "z")):
            self.assertTrue(torch.allclose(torch.as_tensor(fast[i], dtype=torch.float64), slow[name],
                                           rtol=1e-12, atol=1e-14), name)
        fast[0].backward()
        slow["loss"].backward()
        for n in p:
            self.assertTrue(torch.allclose(qa[n].grad, qb[n].grad, rtol=1e-10, atol=1e-13), n)

    def test_cases(self):
        for name, kw in CASES.items():
            with self.subTest(name):
                self.check(**kw)

    def test_capacity_really_drops(self):
        cfg = Config(**dict(BASE, capacity_factor=0.75))
        from examoe_ref.config import expert_capacity
        self.assertLess(expert_capacity(cfg, 3 * cfg.seq_len) * cfg.n_experts, 3 * cfg.seq_len * cfg.top_k)


def run_bench_torch(test, *extra):
    """bench_torch.py on BASE (2 micro-batches of 2 per step), 1 warmup + 2
    timed steps; returns its JSON line."""
    deck = Config(**BASE).to_dict()
    deck["train"] = {"micro_batch": 2, "grad_accum": 2, "steps": 10}
    deck["optim"] = {"lr": 1e-3, "warmup_steps": 2}
    with tempfile.TemporaryDirectory() as d:
        cfg = os.path.join(d, "cfg.json")
        with open(cfg, "w") as f:
            json.dump(deck, f)
        r = subprocess.run([sys.executable, os.path.join(HERE, "bench_torch.py"), "--config", cfg,
                            "--steps", "2", "--warmup", "1", *extra], capture_output=True, text=True)
    test.assertEqual(r.returncode, 0, r.stderr)
    return json.loads(r.stdout.strip().splitlines()[-1])


class CommandLine(unittest.TestCase):
    @classmethod
    def setUpClass(cls):
        cls.one = run_bench_torch(cls())

    def test_ddp_trains_as_one_process(self):
        # DDP over 2 gloo ranks, one micro-batch each, is the same optimizer
        # step as one process accumulating both (up to summation order).
        two = run_bench_torch(self, "--nproc", "2")
        self.assertEqual(two["nproc"], 2)
        self.assertEqual(two["tokens_per_step"], self.one["tokens_per_step"])
        self.assertEqual(len(two["step_cpu_s"]), 2)
        self.assertEqual(len(two["losses"]), 3)
        for a, b in zip(self.one["losses"], two["losses"]):
            self.assertAlmostEqual(a, b, delta=1e-5 * abs(a))

    def test_json_line(self):
        out = self.one
        self.assertEqual(out["tokens_per_step"], 2 * 2 * BASE["seq_len"])
        self.assertEqual(len(out["step_s"]), 2)
        self.assertEqual(len(out["losses"]), 3)
        self.assertEqual(len(out["step_cpu_s"]), 2)
        self.assertEqual(out["threads"], 1)
        self.assertLess(out["verify_max_rel"], 1e-4)


if __name__ == "__main__":
    unittest.main()
