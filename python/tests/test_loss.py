"""Under hdet the step's loss is recorded from the script's backward calls."""

import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # test the checkout
from hdet import _loss

_loss.install()


def model_loss(scale=1.0):
    w = torch.nn.Parameter(torch.tensor([2.0]))
    return w, (w * 3).sum() * scale


class LossRecorderTest(unittest.TestCase):
    def setUp(self):
        _loss.take()

    def test_one_backward(self):
        w, loss = model_loss()
        loss.backward()
        self.assertEqual(float(_loss.take()), 6.0)
        self.assertEqual(float(w.grad), 3.0, "backward still runs")
        self.assertIsNone(_loss.take(), "taken once")

    def test_gradient_accumulation_sums_the_micro_batches(self):
        for _ in range(4):
            _, loss = model_loss(scale=0.25)  # loss / accumulation steps
            loss.backward()
        self.assertAlmostEqual(float(_loss.take()), 6.0)

    def test_autograd_backward_and_several_losses(self):
        _, a = model_loss()
        _, b = model_loss(scale=2)
        torch.autograd.backward([a])
        b.backward()
        self.assertAlmostEqual(float(_loss.take()), 18.0)

    def test_non_scalar_backward_is_not_a_loss(self):
        w = torch.nn.Parameter(torch.ones(3))
        (w * 2).backward(torch.ones(3))
        self.assertIsNone(_loss.take())

    def test_scaled_loss_is_recorded_unscaled(self):
        class Scaler:
            def scale(self, outputs):
                return outputs * 1024.0

        scale = _loss._wrap_scale(Scaler.scale)
        _, loss = model_loss()
        scale(Scaler(), loss).backward()
        self.assertEqual(float(_loss.take()), 6.0)


if __name__ == "__main__":
    unittest.main()
