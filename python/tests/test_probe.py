"""hdet.probe_dataset builds the probe signal's function from a model and a dataset."""

import os
import sys
import unittest

import torch
import torch.nn.functional as F

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # test the checkout
import hdet
from hdet import _attach


def data(n=300):
    g = torch.Generator().manual_seed(1)
    return torch.utils.data.TensorDataset(torch.randn(n, 5, generator=g), torch.randint(0, 3, (n,), generator=g))


class Unreadable:
    def __len__(self):
        return 10

    def __getitem__(self, i):
        raise AssertionError("item %d read" % i)


class ProbeDatasetTest(unittest.TestCase):
    def setUp(self):
        torch.manual_seed(0)
        self.model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Dropout(0.5), torch.nn.Linear(8, 3))

    def tearDown(self):
        hdet.probe(None)

    def expected(self, ds, examples, seed):
        idx = torch.randperm(len(ds), generator=torch.Generator().manual_seed(seed))[:examples]
        x, y = ds.tensors[0][idx], ds.tensors[1][idx]
        self.model.eval()
        with torch.no_grad():
            want = F.cross_entropy(self.model(x), y).item()
        self.model.train()
        return want

    def test_mean_loss_over_the_drawn_items_in_eval_mode(self):
        ds = data()
        fn = hdet.probe_dataset(self.model, ds, examples=100, batch_size=32)  # 4 batches, the last of 4
        self.assertIs(_attach._process.probe, fn, "registered as hdet.probe(fn) does")
        self.assertAlmostEqual(fn(), self.expected(ds, 100, 0), places=5)
        self.assertEqual(fn(), fn(), "eval mode: dropout off, the same answer twice")
        self.assertTrue(self.model.training, "the training mode is restored")
        self.assertTrue(all(p.grad is None for p in self.model.parameters()), "no gradients")
        self.model.eval()
        fn()
        self.assertFalse(self.model.training, "an eval-mode model stays in eval mode")

    def test_the_seed_picks_the_items(self):
        ds = data()
        a = hdet.probe_dataset(self.model, ds, examples=50, seed=3)()
        self.assertAlmostEqual(a, self.expected(ds, 50, 3), places=5)
        self.assertNotAlmostEqual(a, hdet.probe_dataset(self.model, ds, examples=50, seed=4)(), places=5)

    def test_more_examples_than_items_takes_them_all(self):
        ds = data(40)
        self.assertAlmostEqual(hdet.probe_dataset(self.model, ds)(), self.expected(ds, 40, 0), places=5)

    def test_custom_loss(self):
        ds = data()
        fn = hdet.probe_dataset(self.model, ds, loss_fn=lambda out, y: out.pow(2).mean(), examples=10)
        idx = torch.randperm(len(ds), generator=torch.Generator().manual_seed(0))[:10]
        self.model.eval()
        with torch.no_grad():
            want = self.model(ds.tensors[0][idx]).pow(2).mean().item()
        self.model.train()
        self.assertAlmostEqual(fn(), want, places=5, msg="loss_fn, not cross-entropy")

    def test_sequence_model_logits_with_the_classes_last(self):
        # A language model: (batch, time, vocab) logits against (batch, time) targets.
        g = torch.Generator().manual_seed(2)
        ds = torch.utils.data.TensorDataset(torch.randint(0, 7, (20, 5), generator=g),
                                            torch.randint(0, 7, (20, 5), generator=g))
        model = torch.nn.Sequential(torch.nn.Embedding(7, 4), torch.nn.Linear(4, 7))
        fn = hdet.probe_dataset(model, ds, batch_size=8)
        x, y = ds.tensors
        with torch.no_grad():
            want = F.cross_entropy(model(x).reshape(-1, 7), y.reshape(-1)).item()
        self.assertAlmostEqual(fn(), want, places=5)

    def test_torch_layout_wins_where_both_fit(self):
        # (N, C, d1) against (N, d1) with C == d1: torch's layout, classes in dim 1, as F.cross_entropy reads it.
        g = torch.Generator().manual_seed(3)
        ds = torch.utils.data.TensorDataset(torch.randn(12, 4, 4, generator=g), torch.randint(0, 4, (12, 4), generator=g))
        model = torch.nn.Linear(4, 4)
        fn = hdet.probe_dataset(model, ds)
        x, y = ds.tensors
        with torch.no_grad():
            out = model(x)
        self.assertAlmostEqual(fn(), F.cross_entropy(out, y).item(), places=5)
        self.assertNotAlmostEqual(fn(), F.cross_entropy(out.reshape(-1, 4), y.reshape(-1)).item(), places=3)

    def test_items_are_read_at_the_first_probe_only(self):
        fn = hdet.probe_dataset(self.model, Unreadable())
        with self.assertRaisesRegex(AssertionError, "item .* read"):
            fn()

    def test_bad_arguments(self):
        ds = data()
        cases = [
            (dict(model=lambda x: x, dataset=ds), TypeError, "model must be a torch.nn.Module"),
            (dict(model=self.model, dataset=ds, loss_fn=3), TypeError, "loss_fn 3 is not callable"),
            (dict(model=self.model, dataset=ds, examples=0), ValueError, "examples must be a positive int"),
            (dict(model=self.model, dataset=ds, batch_size=2.5), ValueError, "batch_size must be a positive int"),
            (dict(model=self.model, dataset=iter([])), TypeError, "dataset must have a length"),
            (dict(model=self.model, dataset=[]), ValueError, "the dataset is empty"),
        ]
        for kwargs, err, msg in cases:
            with self.subTest(msg=msg), self.assertRaisesRegex(err, msg):
                hdet.probe_dataset(**kwargs)

    def test_items_that_are_not_pairs(self):
        fn = hdet.probe_dataset(self.model, [torch.zeros(5)] * 4)
        with self.assertRaisesRegex(TypeError, r"items must be \(input, target\) pairs"):
            fn()


if __name__ == "__main__":
    unittest.main()
