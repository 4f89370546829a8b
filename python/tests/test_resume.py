"""Resuming a worker run at the step (issue 50, docs/pytorch.md#resume),
under an in-process stand-in for hdet: a launch that hdet asks to save at a
window end and then stops, and a fresh attach in a new process state with
HDET_RESUME_STATE, continue to the bitwise parameters, optimizer state,
scheduler and step of an uninterrupted run (CPU, fixed seeds); the resumed
launch trains only the steps that were left. And what a script that
resumes its own checkpoint gets: hdet.start_step, hdet.checkpoint_path, and
a stop naming the step where hdet cannot keep the passes apart."""

import copy
import itertools
import os
import sys
import tempfile
import unittest
from unittest import mock

import torch
import torch.nn.functional as F
from torch.optim import lr_scheduler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # test the checkout
import hdet
from hdet import _attach, _session

TOTAL, WINDOW = 17, 5


class TrainState:
    """A script's own train state (torchtitan's TrainState): what it counts."""

    def __init__(self):
        self.step, self.tokens = 0, 0

    def state_dict(self):
        return {"step": self.step, "tokens": self.tokens}

    def load_state_dict(self, d):
        self.step, self.tokens = d["step"], d["tokens"]


class Session:
    """hdet's side of one rank, in process: windows of WINDOW steps from
    HELLO's start_step, an lr multiplier that changes every step; at the
    window end `save_at` it asks the script to save to `path`, then stops
    there when `stop` is set. Every window end scales the parameters by
    0.999 (in the shared buffer: a stand-in for the converge), which the
    save must see."""

    def __init__(self, optimizer, hello, save_at=None, path=None, stop=False):
        self.optimizer, self.hello = optimizer, hello
        self.params = [p for g in optimizer.param_groups for p in g["params"]]
        self.start = hello["start_step"]
        self.save_at, self.path, self.stop = save_at, path, stop
        self.finished = False
        self.on_save = None
        self.done_calls, self.saved = [], []

    def next_message(self, evaluate):
        if self.start > self.hello["start_step"]:
            with torch.no_grad():
                for p in self.params:
                    p.mul_(0.999)
        if self.start == self.save_at:
            msg = {"type": "save", "path": self.path, "step": self.start, "pass": "search"}
            self.on_save(msg)
            self.saved.append(msg)
            if self.stop:
                self.finished = True
                return None
        if self.start >= self.hello["total_steps"]:
            self.finished = True
            return None
        steps = min(WINDOW, self.hello["total_steps"] - self.start)
        values = {"lr": [0.5 + 0.25 * ((self.start + j) % 5) for j in range(steps)]}
        msg = {"type": "plan", "window": self.start // WINDOW, "start": self.start, "steps": steps, "values": values,
               "pass": 0, "probe_tail": 0}
        self.start += steps
        return msg

    def hand_over(self):
        pass

    def done(self, window, steps, losses, applied, base_lr, probe=None):
        self.done_calls.append(dict(window=window, steps=steps, losses=losses, base_lr=list(base_lr)))

    def trace(self, **record):
        pass

    def report(self, message):
        self.finished = True

    def fail(self, why):
        self.report(why)
        raise hdet.ProtocolError("hdet: " + why)


def script(state="all"):
    """A user's loop, as a launch runs it from the top: the model (with
    dropout: the RNG matters), AdamW, a cosine schedule and a train state
    given to attach (state="all"; "empty": state={} and a constant rate;
    "none": no state=; "onecycle": hdet.OneCycleLR with hdet_state), batches from torch's global generator. Returns what
    it ends with; hdet.Stopped propagates as in a script."""
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Linear(4, 16), torch.nn.Tanh(), torch.nn.Dropout(0.2), torch.nn.Linear(16, 2))
    opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=0.01)
    train = TrainState()
    if state == "onecycle":  # the import-only path: the scheduler attaches, and is saved with hdet_state
        sched = hdet.OneCycleLR(opt, max_lr=0.02, total_steps=TOTAL, hdet_window=WINDOW,
                                hdet_state={"model": model, "train": train})
    else:
        sched = lr_scheduler.CosineAnnealingLR(opt, T_max=TOTAL, eta_min=1e-4) if state != "empty" else None
        objects = {"all": {"model": model, "sched": sched, "train": train}, "none": None, "empty": {},
                   "loader": {"model": model, "sched": sched, "train": train},
                   "stateful": {"model": model, "sched": sched, "train": train, "loader": stateful_loader()}}[state]
        hdet.attach(opt, TOTAL, window=WINDOW, state=objects)
    if state == "loader":
        return loader_loop(model, opt, sched, train)
    if state == "stateful":
        return stateful_loop(model, opt, sched, train, objects["loader"])
    for _ in range(hdet.start_step(), TOTAL):
        train.step += 1  # torchtitan's order: the train state counts before the step
        x = torch.randn(8, 4)
        train.tokens += x.shape[0]
        F.mse_loss(model(x), x[:, :2].cos()).backward()
        opt.step()
        opt.zero_grad(set_to_none=True)
        if sched is not None:
            sched.step()
    return model, opt, sched, train


def loader_loop(model, opt, sched, train):
    """docs/pytorch.md#resume's data order without a StatefulDataLoader:
    a shuffling DataLoader with its own generator seeded by the epoch, the
    epoch's consumed batches skipped (7 batches an epoch: the 17 steps
    cross two epoch ends)."""
    data = torch.utils.data.TensorDataset(torch.linspace(-1, 1, 56 * 4).reshape(56, 4))
    gen = torch.Generator()
    loader = torch.utils.data.DataLoader(data, batch_size=8, shuffle=True, generator=gen)

    def rest_of_epoch(step):
        epoch, skip = divmod(step, len(loader))
        gen.manual_seed(100 + epoch)
        return itertools.islice(loader, skip, None)

    return epochs_loop(model, opt, sched, train, rest_of_epoch)


def stateful_loader():
    """torchdata's StatefulDataLoader, shuffling (7 batches an epoch): a
    Stateful object in state=, as torchtitan's CheckpointManager holds its
    dataloader. It shuffles with torch's global generator: with a
    generator= of its own, torchdata 0.11 restores the epoch's order but
    not the next epoch's, with or without hdet (docs/pytorch.md#resume)."""
    from torchdata.stateful_dataloader import StatefulDataLoader

    data = torch.utils.data.TensorDataset(torch.linspace(-1, 1, 56 * 4).reshape(56, 4))
    return StatefulDataLoader(data, batch_size=8, shuffle=True)


def stateful_loop(model, opt, sched, train, loader):
    """A loop over epochs of a loader that resumes itself: hdet loaded its
    state at attach, so the first epoch goes on where the saved one was."""
    return epochs_loop(model, opt, sched, train, lambda step: loader)


def epochs_loop(model, opt, sched, train, rest_of_epoch):
    """Epochs of batches from hdet.start_step() to TOTAL steps;
    rest_of_epoch(step) gives the batches left of the epoch step is in.
    train.tokens folds in each batch, in order: the data order's checksum."""
    step = hdet.start_step()
    while step < TOTAL:
        for (x,) in rest_of_epoch(step):
            train.step += 1
            train.tokens = (train.tokens * 31 + int(x.mul(1e4).round().sum())) % (1 << 61)
            F.mse_loss(model(x), x[:, :2].cos()).backward()
            opt.step()
            opt.zero_grad(set_to_none=True)
            sched.step()
            step += 1
            if step == TOTAL:
                break
    return model, opt, sched, train


def fresh():
    """A new process's state of hdet's client."""
    run = _attach._process.run
    if run is not None:
        run.recorder.close()  # the previous run, if it did not end: its wrappers go
    _attach._process = _attach._Process()
    _attach._process.hooked = True


class ResumeTest(unittest.TestCase):
    def setUp(self):
        self.saved_process = _attach._process
        self.dir = tempfile.TemporaryDirectory()
        self.path = os.path.join(self.dir.name, "worker", "rank-1", "search-step-10.pt")
        self.sessions = []
        self.kw = {}
        self.env = mock.patch.dict(os.environ, {"HDET_RANK": "1", "HDET_WORLD_SIZE": "2", "HDET_PASS": "search",
                                                "HDET_RUN_DIR": self.dir.name})
        self.env.start()
        for k in ("HDET_RESUME_STATE", "HDET_RESUME_STEP"):
            os.environ.pop(k, None)

        def session(optimizer, hello):
            s = Session(optimizer, hello, **self.kw)
            self.sessions.append(s)
            return s

        self.patches = [mock.patch.object(_session, "under_hdet", return_value=True),
                        mock.patch.object(_session, "Session", session)]
        for p in self.patches:
            p.start()

    def tearDown(self):
        for p in self.patches:
            p.stop()
        self.env.stop()
        _attach._process = self.saved_process
        self.dir.cleanup()

    def launch(self, state="all", resume=None, **kw):
        """One launch of the script in a fresh process state; returns its
        end, or the Stopped it raised."""
        fresh()
        self.kw = kw
        env = {"HDET_RESUME_STATE": self.path, "HDET_RESUME_STEP": str(resume)} if resume is not None else {}
        with mock.patch.dict(os.environ, env):
            try:
                return script(state)
            except hdet.Stopped as e:
                return e

    def assert_same_end(self, got, want):
        (m, o, s, t), (wm, wo, ws, wt) = got, want
        for a, b in zip(m.state_dict().values(), wm.state_dict().values()):
            self.assertTrue(torch.equal(a, b), "parameters")
        for st, wst in zip(o.state.values(), wo.state.values()):
            for k in wst:
                self.assertTrue(torch.equal(st[k], wst[k]), "optimizer state %r" % k)
        self.assertEqual(o.param_groups[0]["lr"], wo.param_groups[0]["lr"])
        self.assertEqual(s.state_dict(), ws.state_dict())
        self.assertEqual(t.state_dict(), wt.state_dict())
        self.assertEqual(hdet.current(o)["step"], TOTAL)

    def test_a_relaunch_continues_bit_for_bit(self):
        for save_at in (5, 10, 15):
            with self.subTest(save_at=save_at):
                whole = self.launch(save_at=save_at, path=self.path)
                self.assertEqual(self.sessions[-1].saved[0]["step"], save_at, "saved, and ran on")
                first = self.launch(save_at=save_at, path=self.path, stop=True)
                self.assertIsInstance(first, hdet.Stopped)
                self.assertEqual(first.step, save_at)
                self.assertTrue(os.path.exists(self.path) and not os.path.exists(self.path + ".tmp"))
                again = self.launch(resume=save_at)
                self.assertEqual(self.sessions[-1].hello["start_step"], save_at)
                self.assertTrue(self.sessions[-1].hello["resumable"])
                # hdet commits the search pass's peak rate: a resumed launch tells it the peak so far.
                self.assertEqual(self.sessions[0].hello["script_peak_lr"], 0.0)
                before = [b for d in self.sessions[0].done_calls[:save_at // WINDOW] for b in d["base_lr"]]
                self.assertEqual(self.sessions[-1].hello["script_peak_lr"], max(before))
                self.assert_same_end(again, whole)
                ran = self.sessions[-1].done_calls
                self.assertEqual(sum(d["steps"] for d in ran), TOTAL - save_at, "only what was left")
                self.assertEqual([d["losses"] for d in ran],
                                 [d["losses"] for d in self.sessions[0].done_calls[save_at // WINDOW:]])
                self.sessions.clear()

    def test_a_shuffling_loader_resumes_with_its_epoch_and_skip(self):
        for save_at in (5, 10, 15):  # inside the first, second and third epoch
            with self.subTest(save_at=save_at):
                whole = self.launch(state="loader", save_at=save_at, path=self.path)
                self.launch(state="loader", save_at=save_at, path=self.path, stop=True)
                self.assert_same_end(self.launch(state="loader", resume=save_at), whole)

    def test_a_stateful_dataloader_resumes_mid_epoch(self):
        """The data order is the uninterrupted run's across epoch ends. Not
        the parameters: the new iterator draws from torch's generator after
        hdet restored it, so dropout's masks differ from there on."""
        for save_at in (5, 10, 15):  # inside the first, second and third epoch
            with self.subTest(save_at=save_at):
                whole = self.launch(state="stateful", save_at=save_at, path=self.path)
                self.launch(state="stateful", save_at=save_at, path=self.path, stop=True)
                again = self.launch(state="stateful", resume=save_at)
                self.assertEqual(again[3].state_dict(), whole[3].state_dict(), "the batches, in order")
                self.assertEqual(sum(d["steps"] for d in self.sessions[-1].done_calls), TOTAL - save_at)

    def test_hdet_onecycle_resumes_with_hdet_state(self):
        whole = self.launch(state="onecycle", save_at=10, path=self.path)
        self.launch(state="onecycle", save_at=10, path=self.path, stop=True)
        again = self.launch(state="onecycle", resume=10)
        self.assert_same_end(again, whole)
        self.assertIn("hdet.OneCycleLR", torch.load(self.path, weights_only=False)["step_after"])

    def test_a_save_before_a_launchs_first_window(self):
        """hdet may save before a launch's first PLAN (a stop right at its
        start), inside its first optimizer.step(), when the script has drawn
        that step's batch: the file is then the state the launch started
        from (a fresh start's, or the file it resumed)."""
        whole = self.launch(save_at=10, path=self.path)
        for resume in (None, 10):
            with self.subTest(resume=resume):
                if resume is None:
                    path0 = self.path.replace("search-step-10", "search-step-0")
                    stopped = self.launch(save_at=0, path=path0, stop=True)
                    self.assertEqual(stopped.step, 0)
                    self.path = path0
                    self.assert_same_end(self.launch(resume=0), whole)
                    self.path = path0.replace("search-step-0", "search-step-10")
                    continue
                self.launch(save_at=10, path=self.path, stop=True)
                again = self.launch(resume=10, save_at=10, path=self.path, stop=True)  # stopped at once
                self.assertEqual(again.step, 10)
                self.assert_same_end(self.launch(resume=10), whole)

    def test_the_save_holds_the_converged_parameters(self):
        self.launch(save_at=10, path=self.path, stop=True)
        params = [p.detach().clone() for p in self.sessions[-1].params]  # scaled at the window end
        saved = torch.load(self.path, weights_only=False)
        for a, b in zip(saved["params"], params):
            self.assertTrue(torch.equal(a, b))
        self.assertEqual(saved["step"], 10)
        self.assertEqual(sorted(saved["state"]), ["model", "sched", "train"])

    def test_state_of_nothing_but_the_optimizer(self):
        whole = self.launch(state="empty", save_at=10, path=self.path)
        self.launch(state="empty", save_at=10, path=self.path, stop=True)
        again = self.launch(state="empty", resume=10)
        for a, b in zip(again[0].parameters(), whole[0].parameters()):
            self.assertTrue(torch.equal(a, b), "the parameters and optimizer come back without state objects")
        self.assertEqual(hdet.start_step(), 10)

    def test_a_script_that_gives_hdet_nothing_starts_over(self):
        self.launch(save_at=10, path=self.path, stop=True)
        end = self.launch(state="none", resume=10)
        hello = self.sessions[-1].hello
        self.assertEqual((hello["resumable"], hello["start_step"]), (False, 0), "hdet is told, and warns")
        self.assertEqual(sum(d["steps"] for d in self.sessions[-1].done_calls), TOTAL)
        self.assertEqual(end[3].step, TOTAL)

    def test_a_relaunch_with_other_state_names(self):
        self.launch(save_at=10, path=self.path, stop=True)
        with self.assertRaisesRegex(RuntimeError, r"the state hdet saved at step 10 holds \['model', 'sched', 'train'\], but attach's state= gives \[\]"):
            self.launch(state="empty", resume=10)

    def test_the_file_of_another_step(self):
        self.launch(save_at=10, path=self.path, stop=True)
        with self.assertRaisesRegex(RuntimeError, "holds step 10, but hdet resumes at step 5"):
            self.launch(resume=5)

    def test_start_step_is_known_after_attach(self):
        fresh()
        with self.assertRaisesRegex(RuntimeError, r"hdet.start_step\(\) is known once hdet.attach"):
            hdet.start_step()
        self.launch()
        self.assertEqual(hdet.start_step(), 0)


class OwnCheckpointTest(unittest.TestCase):
    """A script that saves and loads its own checkpoints."""

    def setUp(self):
        self.saved_process = _attach._process
        self.dir = tempfile.TemporaryDirectory()
        fresh()

    def tearDown(self):
        _attach._process = self.saved_process
        self.dir.cleanup()

    def stepped_optimizer(self, steps=3):
        model = torch.nn.Linear(4, 2)
        opt = torch.optim.AdamW(model.parameters(), lr=0.01)
        for _ in range(steps):
            model(torch.randn(3, 4)).pow(2).mean().backward()
            opt.step()
        return model, opt

    def test_checkpoint_path(self):
        d = self.dir.name
        env = {"HDET_RANK": "3", "HDET_RUN_DIR": d}
        with mock.patch.dict(os.environ, env):
            self.assertEqual(hdet.checkpoint_path("out/ckpt.pt"), "out/ckpt.pt", "outside hdet")
            with mock.patch.object(_session, "under_hdet", return_value=True):
                for pass_, want in (("", os.path.join(d, "worker", "search", "rank-3", "ckpt.pt")),
                                    ("search", os.path.join(d, "worker", "search", "rank-3", "ckpt.pt")),
                                    ("main", "out/ckpt.pt")):
                    with mock.patch.dict(os.environ, {"HDET_PASS": pass_}):
                        self.assertEqual(hdet.checkpoint_path("out/ckpt.pt"), want)
                self.assertTrue(os.path.isdir(os.path.join(d, "worker", "search", "rank-3")), "ready to save into")

    def test_a_fresh_search_pass_does_not_find_an_earlier_launchs_files(self):
        d = self.dir.name
        old = os.path.join(d, "worker", "search", "rank-0", "ckpt.pt")
        os.makedirs(os.path.dirname(old))
        for resume, kept in (({"HDET_RESUME_STATE": "/r/rank-0/search-step-5.pt", "HDET_RESUME_STEP": "5"}, True),
                             ({}, False)):
            with self.subTest(resume=resume):
                fresh()  # a new process
                torch.save({"step": 100}, old)
                clean = {k: v for k, v in os.environ.items() if not k.startswith("HDET_RESUME_")}
                with mock.patch.dict(os.environ, dict(clean, HDET_RANK="0", HDET_RUN_DIR=d, HDET_PASS="search",
                                                      **resume), clear=True), \
                        mock.patch.object(_session, "under_hdet", return_value=True):
                    self.assertEqual(hdet.checkpoint_path("ckpt.pt"), old)
                    self.assertEqual(os.path.exists(old), kept, "kept only where hdet resumes the search pass")
                    torch.save({"step": 5}, old)
                    self.assertEqual(hdet.checkpoint_path("ckpt.pt"), old)
                    self.assertTrue(os.path.exists(old), "what this launch saved stays")

    def test_outside_hdet_start_step_is_the_scripts(self):
        with mock.patch.dict(os.environ, {"HDET_SOCKET": ""}):
            _, opt = self.stepped_optimizer()
            hdet.attach(opt, 10, start_step=3)
            self.assertEqual(hdet.start_step(), 3)
            for bad in (-1, 2.0, True, "3"):
                with self.assertRaisesRegex(TypeError, "start_step must be an int >= 0"):
                    hdet.attach(self.stepped_optimizer()[1], 10, start_step=bad)
            with self.assertRaisesRegex(TypeError, r"state\['model'\] \(a int\) has no state_dict"):
                hdet.attach(self.stepped_optimizer()[1], 10, state={"model": 3})

    def run_under_hdet(self, env, opt, model, **attach_kw):
        """The script's first step under a stand-in for hdet."""
        sessions = []

        def session(optimizer, hello):
            s = Session(optimizer, hello)
            sessions.append(s)
            return s

        clean = {k: v for k, v in os.environ.items() if not k.startswith("HDET_RESUME_")}
        with mock.patch.dict(os.environ, dict(clean, **env), clear=True), \
                mock.patch.object(_session, "under_hdet", return_value=True), \
                mock.patch.object(_session, "Session", session):
            hdet.attach(opt, 20, window=WINDOW, **attach_kw)
            model(torch.randn(3, 4)).pow(2).mean().backward()
            opt.step()
        return sessions

    def test_the_main_pass_stops_at_a_search_pass_checkpoint(self):
        model, opt = self.stepped_optimizer(3)
        with self.assertRaisesRegex(RuntimeError, r"the main pass starts at step 0, but the script resumed a "
                                    r"checkpoint at step 3 that hdet did not resume: one the script wrote in the search pass.*"
                                    r"torch.save\(\.\.\., hdet.checkpoint_path\(\"ckpt.pt\"\)\)"):
            self.run_under_hdet({"HDET_PASS": "main"}, opt, model)

    def test_a_fresh_optimizer_in_the_main_pass_runs(self):
        model, opt = self.stepped_optimizer(0)
        sessions = self.run_under_hdet({"HDET_PASS": "main"}, opt, model)
        self.assertEqual(len(sessions[0].done_calls), 0)
        self.assertEqual(hdet.current(opt)["step"], 1)

    def test_start_step_that_is_not_hdets(self):
        model, opt = self.stepped_optimizer(3)
        with self.assertRaisesRegex(RuntimeError, "hdet starts this run at step 0 of the search pass, but the script "
                                    "resumed its own checkpoint at step 3"):
            self.run_under_hdet({"HDET_PASS": "search"}, opt, model, start_step=3)

    def test_a_search_pass_started_over_on_the_scripts_own_checkpoint(self):
        """hdet starts a script that gave it no state over from step 0; the
        script's own checkpoint of the main pass must not silently become
        the search pass's start."""
        model, opt = self.stepped_optimizer(3)
        with self.assertRaisesRegex(RuntimeError, r"hdet starts this run at step 0 of the search pass, but the script "
                                    r"resumed its own checkpoint at step 3: give hdet the script's state"):
            self.run_under_hdet({"HDET_PASS": "search"}, opt, model)

    def test_a_deliberate_start_from_another_runs_optimizer(self):
        model, opt = self.stepped_optimizer(3)
        sessions = self.run_under_hdet({"HDET_PASS": "main"}, opt, model, start_step=0)
        self.assertEqual(sessions[0].hello["start_step"], 0)
        self.assertEqual(hdet.current(opt)["step"], 1)

    def test_start_step_at_hdets_step_resumes(self):
        """A script that restores itself at hdet's step: hdet's file gives
        the client's state, and the loop goes on from there."""
        path = os.path.join(self.dir.name, "w.pt")
        model, opt = self.stepped_optimizer(5)
        _, writer = copy.deepcopy((model, opt))  # the launch that saved; this one restored itself
        run = _attach.Attachment(writer, 20, _attach.Values(writer, {}), {"window": WINDOW}, None, None)
        run.resume({}, None)
        run.step_num, run.windows.planned = 5, True  # in the middle of a launch
        run._save({"path": path, "step": 5})
        run.recorder.close()
        fresh()
        env = {"HDET_PASS": "main", "HDET_RESUME_STATE": path, "HDET_RESUME_STEP": "5"}
        sessions = self.run_under_hdet(env, opt, model, start_step=5)
        self.assertEqual(sessions[0].hello["start_step"], 5)
        self.assertEqual(hdet.start_step(), 5)
        fresh()
        with self.assertRaisesRegex(RuntimeError, r"resumed its own checkpoint at step 4 \(attach\(\.\.\., "
                                    r"start_step=4\)\), but hdet resumes this run at step 5"):
            self.run_under_hdet(env, opt, model, start_step=4)


if __name__ == "__main__":
    unittest.main()
