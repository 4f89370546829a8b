"""The attached optimizer's step wrapper and torch's LR schedulers, which
wrap optimizer.step themselves. Two private parts of torch (2.15) are
relied on, and these tests fail when either changes: a scheduler marks its
wrapper with _wrapped_by_lr_sched (and warns at its first step when the
optimizer's step lacks the mark), and it wraps the step's __func__ (so the
client's wrapper must be a bound method)."""

import os
import sys
import unittest
import warnings

import torch
from torch.optim import lr_scheduler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # test the checkout
from hdet._attachment import _wrap_step


def optimizer():
    w = torch.nn.Parameter(torch.ones(2))
    return w, torch.optim.SGD([w], lr=0.1)


class StepWrapperTest(unittest.TestCase):
    def train(self, w, opt, sched, steps=3):
        with warnings.catch_warnings():
            warnings.simplefilter("error")  # torch's "optimizer.step() has been overridden" included
            for _ in range(steps):
                (w * 2).sum().backward()
                opt.step()
                sched.step()

    def test_a_scheduler_built_before_keeps_its_mark(self):
        w, opt = optimizer()
        sched = lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        self.assertTrue(getattr(opt.step, "_wrapped_by_lr_sched", False), "torch marks its wrapper")
        calls = []
        _wrap_step(opt, lambda original, *a, **k: (calls.append(1), original(*a, **k))[1])
        self.assertTrue(getattr(opt.step, "_wrapped_by_lr_sched", False), "the client's wrapper carries the mark")
        self.train(w, opt, sched)
        self.assertEqual(len(calls), 3)
        self.assertAlmostEqual(opt.param_groups[0]["lr"], 0.1 * 0.5**3)

    def test_a_scheduler_built_after_wraps_the_clients_step(self):
        w, opt = optimizer()
        calls = []
        _wrap_step(opt, lambda original, *a, **k: (calls.append(1), original(*a, **k))[1])
        self.assertTrue(hasattr(opt.step, "__func__"), "a bound method, whose __func__ torch's scheduler wraps")
        sched = lr_scheduler.StepLR(opt, step_size=1, gamma=0.5)
        self.train(w, opt, sched)
        self.assertEqual(len(calls), 3)


if __name__ == "__main__":
    unittest.main()
