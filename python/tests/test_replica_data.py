"""Each replica's data in local sync mode (issue 51): in a search pass that
hdet restarts (its PLANs say "search") every replica keeps the script's
seeds, so rank 1 draws rank 0's batches; in the main pass rank r > 0
offsets its seeds by r at attach, and so it does in a run that the attach
line's own options make one pass, or in a run with a probe; in another run of one pass (no
"search") it does so at the first plan, so only the first step's batch is
shared; a
search pass that stops saying "search" gives each replica its own data
from the next window on."""

import os
import sys
import unittest
from unittest import mock

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # test the checkout
from test_attach import FakeSession, fresh, quiet

import hdet
from hdet import _attach, _session

SEED, STEPS, WINDOW = 7, 9, 3


class PlanSession(FakeSession):
    """FakeSession whose plans say "search" for the windows search(k) names."""

    def __init__(self, optimizer, hello, search):
        super().__init__(optimizer, hello, hello["total_steps"], WINDOW, lambda name, step: 1.0)
        self.search = search

    def next_message(self, evaluate):
        msg = super().next_message(evaluate)
        if msg is not None and self.search(msg["window"]):
            msg["search"] = True
        return msg


def batches(seed, n, model=False):
    """n batches drawn after torch.manual_seed(seed) (and, model: the
    script's model built from that seed first)."""
    torch.manual_seed(seed)
    if model:
        torch.nn.Linear(2, 1)
    return [torch.randn(4, 2) for _ in range(n)]


def script(n):
    """The batches of the script's own seeds: rank 0's."""
    return batches(SEED, n, model=True)


class ReplicaDataTest(unittest.TestCase):
    def setUp(self):
        self.saved = _attach._process
        fresh()
        self.w = quiet()

    def tearDown(self):
        _attach._process = self.saved
        self.w.__exit__(None, None, None)

    def train(self, rank, pass_, search, **options):
        """The batches rank draws under hdet (a stand-in session) in pass_."""
        env = {"HDET_RANK": str(rank), "HDET_WORLD_SIZE": "2", "HDET_PASS": pass_}
        session = lambda opt, hello: PlanSession(opt, hello, search)  # noqa: E731
        with mock.patch.dict(os.environ, env), mock.patch.object(_session, "under_hdet", return_value=True), \
                mock.patch.object(_session, "Session", session):
            torch.manual_seed(SEED)
            model = torch.nn.Linear(2, 1)
            opt = hdet.attach(torch.optim.SGD(model.parameters(), lr=0.1), STEPS, **options)
            drawn = []
            for _ in range(STEPS):
                x = torch.randn(4, 2)
                drawn.append(x)
                model(x).pow(2).mean().backward()
                opt.step()
                opt.zero_grad()
        return drawn

    def assertBatches(self, got, want, why):
        self.assertEqual(len(got), len(want))
        for k, (g, w) in enumerate(zip(got, want)):
            self.assertTrue(torch.equal(g, w), "%s: step %d" % (why, k))

    def test_the_search_pass_shares_the_scripts_batches(self):
        got = self.train(1, "search", lambda k: True)
        self.assertBatches(got, script(STEPS), "rank 1 draws rank 0's batches in a search pass")

    def test_the_main_pass_gives_each_replica_its_own(self):
        got = self.train(1, "main", lambda k: False)
        self.assertBatches(got, batches(SEED + 1, STEPS), "rank 1 reseeded at attach in the main pass")
        self.assertBatches(self.fresh_train(0, "main"), script(STEPS), "rank 0 keeps the script's seeds")

    def fresh_train(self, rank, pass_):
        fresh()
        return self.train(rank, pass_, lambda k: False)

    def test_a_run_of_one_pass_shares_only_its_first_batch(self):
        got = self.train(1, "search", lambda k: False)
        self.assertBatches(got[:1], script(1), "the first batch is drawn before the first plan")
        self.assertBatches(got[1:], batches(SEED + 1, STEPS - 1), "rank 1 reseeded at the first plan")

    def test_an_attach_line_that_turns_the_search_off_gives_each_its_own_at_attach(self):
        for options in ({"alpha": 0, "auto": {"enabled": False}}, {"auto": {"commit": "continue"}},
                        {"auto": {"until": 1.0}}):
            fresh()
            got = self.train(1, "search", lambda k: False, **options)
            self.assertBatches(got, batches(SEED + 1, STEPS), "one pass by %r: rank 1 reseeded at attach" % options)

    def test_a_run_with_a_probe_gives_each_its_own_at_attach(self):
        """hdet judges a search on a probe with every replica on its own
        batches, whatever its plans say, so a probe registered before the
        attach line reseeds there."""
        hdet.probe(lambda: 0.5)
        got = self.train(1, "search", lambda k: True)
        self.assertBatches(got, batches(SEED + 1, STEPS), "a probe: rank 1 reseeded at attach")

    def test_a_search_that_stops_saying_search_gives_its_own_from_the_next_window(self):
        got = self.train(1, "search", lambda k: k == 0)
        self.assertBatches(got[:WINDOW], script(WINDOW), "window 0 shared")
        self.assertBatches(got[WINDOW:], batches(SEED + 1, STEPS - WINDOW), "reseeded at window 1's plan")


if __name__ == "__main__":
    unittest.main()
