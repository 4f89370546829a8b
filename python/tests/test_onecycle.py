"""Outside hdet, hdet.OneCycleLR must be torch's OneCycleLR step by step (its state_dict
included); hdet.attach's own tests are in test_attach.py."""

import os
import subprocess
import sys
import tempfile
import unittest
import warnings

import torch
from torch.optim.lr_scheduler import OneCycleLR as TorchOneCycleLR

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # test the checkout
import hdet
from hdet._values import Values, restore

# These tests step the scheduler without training; torch warns about the order.
ORDER_WARNING = r"Detected call of `lr_scheduler.step\(\)` before"

CONFIGS = [
    dict(max_lr=0.1, total_steps=100),
    dict(max_lr=0.05, total_steps=37, anneal_strategy="linear"),
    dict(max_lr=0.1, total_steps=120, three_phase=True),
    dict(max_lr=0.1, total_steps=120, three_phase=True, anneal_strategy="linear", pct_start=0.2),
    dict(max_lr=0.3, epochs=3, steps_per_epoch=17, pct_start=0.4, div_factor=10.0, final_div_factor=100.0),
    dict(max_lr=[0.1, 0.01], total_steps=50, base_momentum=[0.8, 0.85], max_momentum=[0.9, 0.95]),
    dict(max_lr=0.1, total_steps=40, cycle_momentum=False),
]


def make_optimizer(kind, groups):
    torch.manual_seed(0)
    params = [[torch.nn.Parameter(torch.randn(3))] for _ in range(groups)]
    if kind == "adamw":
        return torch.optim.AdamW([{"params": p} for p in params], lr=1e-3, weight_decay=0.01)
    return torch.optim.SGD([{"params": p} for p in params], lr=0.1, momentum=0.9)


def momentum_of(group):
    return group["betas"][0] if "betas" in group else group["momentum"]


class OutsideHdetTest(unittest.TestCase):
    def setUp(self):
        os.environ.pop("HDET_SOCKET", None)
        quiet = warnings.catch_warnings()
        quiet.__enter__()
        self.addCleanup(quiet.__exit__, None, None, None)
        warnings.filterwarnings("ignore", message=ORDER_WARNING)

    def test_matches_torch_step_by_step(self):
        for cfg in CONFIGS:
            for kind in ("sgd", "adamw"):
                with self.subTest(cfg=cfg, optimizer=kind):
                    groups = len(cfg["max_lr"]) if isinstance(cfg["max_lr"], list) else 1
                    if not cfg.get("cycle_momentum", True) and kind == "sgd":
                        continue
                    o1, o2 = make_optimizer(kind, groups), make_optimizer(kind, groups)
                    ref, ours = TorchOneCycleLR(o1, **cfg), hdet.OneCycleLR(o2, **cfg)
                    self.assertIsInstance(ours, TorchOneCycleLR)
                    for step in range(ref.total_steps):
                        for g1, g2 in zip(o1.param_groups, o2.param_groups):
                            self.assertEqual(g1["lr"], g2["lr"], "lr at step %d" % step)
                            self.assertEqual(momentum_of(g1), momentum_of(g2), "momentum at step %d" % step)
                        self.assertEqual(ref.get_last_lr(), ours.get_last_lr())
                        o1.step()
                        o2.step()
                        ref.step()
                        ours.step(loss=torch.tensor(1.0))  # the loss is ignored outside hdet

    def test_too_many_steps_fails_like_torch(self):
        ref = TorchOneCycleLR(make_optimizer("sgd", 1), max_lr=0.1, total_steps=3)
        ours = hdet.OneCycleLR(make_optimizer("sgd", 1), max_lr=0.1, total_steps=3)
        for _ in range(3):
            ref.step()
            ours.step()
        with self.assertRaises(ValueError):
            ref.step()
        with self.assertRaises(ValueError):
            ours.step()

    def test_state_dict_round_trip(self):
        cfg = dict(max_lr=0.1, total_steps=60, three_phase=True)
        o_ref, o_a = make_optimizer("sgd", 1), make_optimizer("sgd", 1)
        ref, a = TorchOneCycleLR(o_ref, **cfg), hdet.OneCycleLR(o_a, **cfg, explore=["lr", "momentum"])
        for _ in range(23):
            ref.step()
            a.step()
        sd = a.state_dict()
        # torch 1.x's state_dict holds its bound anneal_func: pickling it
        # would pickle the scheduler and need hdet to load; the loader keeps
        # its own.
        self.assertEqual(set(sd), set(ref.state_dict()) - {"anneal_func"}, "torch's state_dict keys")
        o_b = make_optimizer("sgd", 1)
        b = hdet.OneCycleLR(o_b, **cfg)
        b.load_state_dict(sd)
        o_b.load_state_dict(o_a.state_dict())
        for step in range(23, 60):
            self.assertEqual(o_b.param_groups[0]["lr"], o_ref.param_groups[0]["lr"], "lr at step %d" % step)
            self.assertEqual(o_b.param_groups[0]["momentum"], o_ref.param_groups[0]["momentum"])
            ref.step()
            b.step()

    def test_state_dict_loads_without_hdet(self):
        o = make_optimizer("sgd", 1)
        s = hdet.OneCycleLR(o, max_lr=0.1, total_steps=30, anneal_strategy="linear")
        for _ in range(7):
            s.step()
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "sched.pt")
            torch.save(s.state_dict(), path)
            code = ("import sys, torch\n"
                    "assert 'hdet' not in sys.modules\n"
                    "p = [torch.nn.Parameter(torch.zeros(1))]\n"
                    "o = torch.optim.SGD(p, lr=0.1, momentum=0.9)\n"
                    "s = torch.optim.lr_scheduler.OneCycleLR(o, max_lr=0.1, total_steps=30, anneal_strategy='linear')\n"
                    "s.load_state_dict(torch.load(sys.argv[1]))\n"
                    "print(s.last_epoch, s.get_last_lr()[0])\n")
            out = subprocess.run([sys.executable, "-c", code, path], check=True, capture_output=True, text=True,
                                 cwd=d, env={k: v for k, v in os.environ.items() if k != "PYTHONPATH"})
        epoch, lr = out.stdout.split()
        self.assertEqual(int(epoch), 7)
        self.assertEqual(float(lr), s.get_last_lr()[0])

    def test_torch_state_dict_loads_into_hdet(self):
        o1, o2 = make_optimizer("adamw", 1), make_optimizer("adamw", 1)
        ref = TorchOneCycleLR(o1, max_lr=0.01, total_steps=30)
        for _ in range(11):
            ref.step()
        ours = hdet.OneCycleLR(o2, max_lr=0.01, total_steps=30)
        ours.load_state_dict(ref.state_dict())
        ours.step()
        ref.step()
        self.assertEqual(ours.get_last_lr(), ref.get_last_lr())

    def test_rejects_unknown_explored_name(self):
        with self.assertRaisesRegex(ValueError, "cannot explore 'dropout'"):
            hdet.OneCycleLR(make_optimizer("sgd", 1), max_lr=0.1, total_steps=10, explore=["dropout"])

    def test_values_with_decay_and_no_decay_groups(self):
        # nanoGPT's grouping: weight decay on matrices, none on biases and norms.
        model = torch.nn.Sequential(torch.nn.Linear(4, 4), torch.nn.LayerNorm(4))
        params = list(model.parameters())
        opt = torch.optim.AdamW([{"params": [p for p in params if p.dim() >= 2], "weight_decay": 0.1},
                                 {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}],
                                lr=1e-3, betas=(0.9, 0.95))
        hdet.OneCycleLR(opt, max_lr=[2e-3, 1e-3], total_steps=10, cycle_momentum=False)
        values = Values(opt, {})
        self.assertEqual(values.names(), ["lr", "weight_decay", "momentum", "lr/0", "weight_decay/0", "lr/1",
                                          "weight_decay/1"])
        script = [dict(g) for g in opt.param_groups]

        def check(values_now, want, key):
            saved = values.enter(values_now)
            self.assertEqual([g[key] for g in opt.param_groups], want)
            restore(saved)
            self.assertEqual([g[key] for g in opt.param_groups], [g[key] for g in script], "restored")

        lrs = [g["lr"] for g in script]
        check({"lr": 4.0}, [4.0 * lrs[0], 4.0 * lrs[1]], "lr")  # one multiplier: the groups keep their ratio
        check({"lr/1": 0.5}, [lrs[0], 0.5 * lrs[1]], "lr")  # a group by its index
        check({"weight_decay": 0.05}, [0.05, 0.0], "weight_decay")  # the no-decay group stays at 0
        check({"momentum": 0.8}, [(0.8, 0.95), (0.8, 0.95)], "betas")  # beta2 kept
        check({"weight_decay/1": 0.01}, [0.1, 0.01], "weight_decay")

    def test_helpers_outside_hdet(self):
        self.assertFalse(hdet.under_hdet())
        self.assertIsNone(hdet.current())
        self.assertEqual((hdet.rank(), hdet.world_size()), (0, 1))
        model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.5))
        hdet.dropout_setter(model)(0.125)
        self.assertEqual(model[1].p, 0.125)
        with self.assertRaises(ValueError):
            hdet.dropout_setter(torch.nn.Linear(2, 2))


if __name__ == "__main__":
    unittest.main()
