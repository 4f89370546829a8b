"""Under hdet the step's loss is recorded from the script's backward calls,
while an optimizer is attached, and nothing stays wrapped after."""

import os
import sys
import unittest

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # test the checkout
from hdet import _attachment, _loss


def model_loss(scale=1.0):
    w = torch.nn.Parameter(torch.tensor([2.0]))
    return w, (w * 3).sum() * scale


class LossRecorderTest(unittest.TestCase):
    def setUp(self):
        scaler = torch.amp.GradScaler
        self.before = (torch.autograd.backward, scaler.scale, scaler.step)
        self.w = torch.nn.Parameter(torch.tensor([2.0]))
        self.opt = torch.optim.SGD([self.w], lr=0.1)
        self.rec = _loss.LossRecorder(self.opt)
        self.addCleanup(self.rec.close)

    def test_one_backward(self):
        """Tensor.backward goes through torch.autograd.backward (torch 2.15):
        this fails if it stops doing so."""
        w, loss = model_loss()
        loss.backward()
        self.assertEqual(float(self.rec.take()), 6.0)
        self.assertEqual(float(w.grad), 3.0, "backward still runs")
        self.assertIsNone(self.rec.take(), "taken once")

    def test_gradient_accumulation_sums_the_micro_batches(self):
        for _ in range(4):
            _, loss = model_loss(scale=0.25)  # loss / accumulation steps
            loss.backward()
        self.assertAlmostEqual(float(self.rec.take()), 6.0)

    def test_autograd_backward_and_several_losses(self):
        _, a = model_loss()
        _, b = model_loss(scale=2)
        torch.autograd.backward([a])
        torch.autograd.backward(tensors=b)
        self.assertAlmostEqual(float(self.rec.take()), 18.0)

    def test_non_scalar_backward_is_not_a_loss(self):
        w = torch.nn.Parameter(torch.ones(3))
        (w * 2).backward(torch.ones(3))
        self.assertIsNone(self.rec.take())

    def test_the_optimizers_steps_are_counted(self):
        other = torch.optim.SGD([torch.nn.Parameter(torch.ones(1))], lr=0.1)
        (self.w * 3).sum().backward()
        self.opt.step()
        other.step()
        self.assertEqual(self.rec.steps, 1, "the attached optimizer's only")

    def test_scaled_loss_is_recorded_unscaled(self):
        scaler = torch.amp.GradScaler("cpu", init_scale=1024.0)
        _, loss = model_loss()
        scaler.scale(loss).backward()
        self.assertEqual(float(self.rec.take()), 6.0)

    def test_a_step_the_scaler_skips_records_no_loss(self):
        scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
        scaler.scale((self.w * 3).sum()).backward()
        self.w.grad.fill_(float("inf"))
        scaler.step(self.opt)  # skipped: the optimizer's step is not called
        scaler.update()
        self.assertEqual(self.rec.steps, 0)
        self.assertIsNone(self.rec.take(), "the skipped iteration's loss belongs to no step")
        self.opt.zero_grad()
        scaler.scale((self.w * 3).sum()).backward()
        scaler.step(self.opt)
        self.assertEqual(self.rec.steps, 1)
        self.assertEqual(float(self.rec.take()), 6.0)

    def test_a_fused_step_the_scaler_skips_is_seen(self):
        """GradScaler hands a fused optimizer found_inf for the step it
        skips (a private hand-over, torch 2.15): this fails if it stops."""
        w = torch.nn.Parameter(torch.tensor([2.0]))
        opt = torch.optim.SGD([w], lr=0.1, fused=True)
        seen = []
        opt.register_step_pre_hook(lambda o, args, kwargs: seen.append(_attachment._skipped(o)))
        scaler = torch.amp.GradScaler("cpu", init_scale=4.0)
        for bad in (True, False):
            opt.zero_grad()
            scaler.scale((w * 3).sum()).backward()
            if bad:
                w.grad.fill_(float("inf"))
            scaler.step(opt)
            scaler.update()
        self.assertEqual(seen, [True, False])

    def test_what_is_patched_is_listed_and_only_while_open(self):
        self.assertEqual(self.rec.patched, list(_loss.LossRecorder.PATCHES))
        self.rec.close()
        self.assertEqual(self.rec.patched, [])

    def test_close_puts_everything_back(self):
        scaler = torch.amp.GradScaler
        self.assertIs(torch.autograd.backward.__wrapped__, self.before[0])
        self.rec.close()
        self.assertEqual((torch.autograd.backward, scaler.scale, scaler.step), self.before)
        _, loss = model_loss()
        loss.backward()
        self.opt.step()
        self.assertIsNone(self.rec.take())
        self.assertEqual(self.rec.steps, 0, "the step hook is removed")


if __name__ == "__main__":
    unittest.main()
