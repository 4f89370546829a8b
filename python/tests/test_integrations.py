"""hdet.integrations: the Hugging Face Trainer and Lightning callbacks.

Outside hdet a callback checks its arguments and changes nothing (the same
parameters to the bit, the same logs). Under a stand-in for hdet's session
(no hdet process) it attaches the trainer's torch optimizer with the
trainer's step count, hands hdet a step that AMP's GradScaler skipped as a
step that moves nothing (a real torch.amp.GradScaler on the CPU, gradients
made infinite at chosen steps), logs hdet's values through the trainer's
own logging, evaluates the probe on fixed evaluation items, moves every
folder but the main pass's rank 0's, and writes hdet.json there. The runs
under real mpirun and srun are tests/integrations_test.go.
"""

import contextlib
import csv
import glob
import inspect
import json
import math
import os
import subprocess
import sys
import tempfile
import unittest
import warnings
from typing import ClassVar
from unittest import mock

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # test the checkout
import hdet
from hdet import _attach, _session
from hdet.integrations import _common

try:
    import transformers

    from hdet.integrations import transformers as hf
except ImportError:  # pragma: no cover - the project venv has it
    transformers = None
try:
    import lightning.pytorch as pl

    from hdet.integrations import lightning as hl
except ImportError:  # pragma: no cover
    pl = None

PLAN = [0.5, 1.5, 0.75, 2.0, 1.25, 0.9]  # the fake plan's lr multiplier, by window


class FakeSession:
    """hdet's side of one rank, in process: windows of `window` steps, the
    lr multiplier PLAN[window] (main pass: 2.5 throughout), a probe at
    every window's last step."""

    def __init__(self, optimizer, hello, window, main):
        self.optimizer, self.hello, self.window, self.main = optimizer, hello, window, main
        self.total = hello["total_steps"]
        self.params = [p for g in optimizer.param_groups for p in g["params"]]
        self.finished = False
        self.start = 0
        self.done_calls = []

    def next_message(self, evaluate):
        if self.start >= self.total:
            self.finished = True
            return None
        steps = min(self.window, self.total - self.start)
        m = 2.5 if self.main else PLAN[len(self.done_calls) % len(PLAN)]
        msg = {"type": "plan", "window": len(self.done_calls), "start": self.start, "steps": steps,
               "values": {"lr": [m] * steps}, "pass": 1 if self.main else 0, "probe_tail": 1}
        self.start += steps
        return msg

    def hand_over(self):
        pass

    def done(self, window, steps, losses, applied, base_lr, probe=None):
        self.done_calls.append(dict(window=window, steps=steps, losses=losses, applied=applied, base_lr=base_lr,
                                    probe=probe))

    def trace(self, **record):
        pass

    def report(self, message):
        self.finished = True

    def fail(self, why):
        self.report(why)
        raise hdet.ProtocolError("hdet: " + why)


@contextlib.contextmanager
def fake_hdet(rank=1, main=False, window=3):
    """Run the body as rank `rank` of 2 under a stand-in for hdet; yields
    the list the sessions are appended to."""
    saved = _attach._process
    _attach._process = _attach._Process()
    _attach._process.hooked = True  # no excepthook or atexit from a test
    sessions = []

    def session(optimizer, hello):
        s = FakeSession(optimizer, hello, window, main)
        sessions.append(s)
        return s

    env = {"HDET_RANK": str(rank), "HDET_WORLD_SIZE": "2", "HDET_PASS": "main" if main else ""}
    try:
        with mock.patch.dict(os.environ, env), mock.patch.object(_session, "under_hdet", return_value=True), \
                mock.patch.object(_session, "Session", session):
            yield sessions
    finally:
        run = _attach._process.run
        if run is not None:
            run.recorder.close()  # a run the test left unfinished: its wrappers go
        _attach._process = saved


def outside_hdet():
    os.environ.pop("HDET_SOCKET", None)
    os.environ.pop("HDET_PASS", None)


# -- the parts ----------------------------------------------------------------


class EnvironmentTest(unittest.TestCase):
    LAUNCHED: ClassVar[dict] = {"RANK": "1", "WORLD_SIZE": "2", "LOCAL_RANK": "1", "LOCAL_WORLD_SIZE": "2", "MASTER_ADDR": "h",
                "MASTER_PORT": "29500", "TORCHELASTIC_RUN_ID": "x", "OMPI_COMM_WORLD_SIZE": "2",
                "OMPI_COMM_WORLD_RANK": "1", "OMPI_COMM_WORLD_LOCAL_RANK": "1", "OMPI_UNIVERSE_SIZE": "2",
                "OMPI_MCA_ess": "^singleton", "OMPI_MCA_orte_hnp_uri": "x", "OMPI_MCA_ess_base_vpid": "1",
                "PMIX_RANK": "1", "PMI_SIZE": "2", "PMI_RANK": "1", "MPI_LOCALNRANKS": "2", "MV2_COMM_WORLD_SIZE": "2",
                "SLURM_PROCID": "1", "SLURM_LOCALID": "1", "SLURM_NTASKS": "2", "SLURM_NTASKS_PER_NODE": "2",
                "JSM_NAMESPACE_SIZE": "2"}
    KEPT: ClassVar[dict] = {"HDET_RANK": "1", "HDET_WORLD_SIZE": "2", "HDET_SOCKET": "@x", "OMPI_MCA_btl": "^openib",
            "SLURM_JOB_ID": "42", "SLURM_CPUS_PER_TASK": "4", "CUDA_VISIBLE_DEVICES": "1", "OMP_NUM_THREADS": "2"}

    def setUp(self):
        self.saved = dict(_attach._process.hidden_env)

    def tearDown(self):
        _attach._process.hidden_env.clear()
        _attach._process.hidden_env.update(self.saved)

    def test_under_hdet_the_launchers_variables_leave(self):
        with mock.patch.dict(os.environ, dict(self.LAUNCHED, **self.KEPT)):
            hidden = _common.hide_launcher_environment()
            for k in self.LAUNCHED:
                self.assertNotIn(k, os.environ)
                self.assertEqual(hidden[k], self.LAUNCHED[k])
            for k, v in self.KEPT.items():
                self.assertEqual(os.environ.get(k), v, k)
            self.assertEqual(hdet.integrations.hidden_environment(), hidden)
            self.assertEqual(hdet.rank(), 1, "hdet's own rank stays")

    def test_with_replica_groups_the_replica_world_stays(self):
        torchrun = {k: self.LAUNCHED[k] for k in ("RANK", "WORLD_SIZE", "LOCAL_RANK", "MASTER_ADDR", "MASTER_PORT")}
        with mock.patch.dict(os.environ, dict(self.LAUNCHED, HDET_REPLICA_SIZE="2", **self.KEPT)):
            _common.hide_launcher_environment()
            for k, v in torchrun.items():
                self.assertEqual(os.environ.get(k), v, k)
            self.assertNotIn("OMPI_COMM_WORLD_SIZE", os.environ)
            self.assertNotIn("SLURM_NTASKS", os.environ)

    def test_outside_hdet_nothing_leaves(self):
        with mock.patch.dict(os.environ, self.LAUNCHED):
            os.environ.pop("HDET_SOCKET", None)
            self.assertEqual(_common.hide_launcher_environment(), {})
            for k, v in self.LAUNCHED.items():
                self.assertEqual(os.environ[k], v)

    def test_folders(self):
        cases = [  # socket, pass, rank, replica size -> folder
            ("", "", "3", "1", "out"),
            ("@s", "", "0", "1", os.path.join("out", "hdet", "search", "rank-0")),
            ("@s", "", "3", "1", os.path.join("out", "hdet", "search", "rank-3")),
            ("@s", "main", "0", "1", "out"),
            ("@s", "main", "2", "1", os.path.join("out", "hdet", "main", "rank-2")),
            ("@s", "main", "1", "2", "out"),  # rank 1 of replica 0
            ("@s", "main", "3", "2", os.path.join("out", "hdet", "main", "rank-2")),
        ]
        for sock, pass_, rank, size, want in cases:
            env = {"HDET_SOCKET": sock, "HDET_PASS": pass_, "HDET_RANK": rank, "HDET_REPLICA_SIZE": size}
            with mock.patch.dict(os.environ, env):
                self.assertEqual(_common.replica_dir("out"), want, env)

    def test_import_loads_neither_library(self):
        code = ("import sys, hdet, hdet.integrations; "
                "print(sorted(m for m in ('transformers', 'lightning', 'pytorch_lightning', 'accelerate') "
                "if m in sys.modules))")
        env = dict(os.environ, PYTHONPATH=os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, check=True)
        self.assertEqual(out.stdout.strip(), "[]")


class NoGradStepTest(unittest.TestCase):
    """A skipped step is handed to hdet as a step with every gradient None,
    which torch's optimizers take without touching parameters or state."""

    def test_no_gradient_no_change(self):
        makers = {
            "SGD momentum": lambda p: torch.optim.SGD(p, lr=0.1, momentum=0.9, weight_decay=0.01),
            "Adam": lambda p: torch.optim.Adam(p, lr=0.1),
            "AdamW": lambda p: torch.optim.AdamW(p, lr=0.1),
            "AdamW foreach": lambda p: torch.optim.AdamW(p, lr=0.1, foreach=True),
            "AdamW fused": lambda p: torch.optim.AdamW(p, lr=0.1, fused=True),
            "RMSprop": lambda p: torch.optim.RMSprop(p, lr=0.1, momentum=0.5),
            "Adagrad": lambda p: torch.optim.Adagrad(p, lr=0.1),
        }
        for name, make in makers.items():
            torch.manual_seed(0)
            model = torch.nn.Linear(4, 3)
            opt = make(model.parameters())
            model(torch.randn(8, 4)).square().mean().backward()
            opt.step()
            params = [p.detach().clone() for p in model.parameters()]
            state = {k: v.clone() for st in opt.state.values() for k, v in st.items() if torch.is_tensor(v)}
            for p in model.parameters():
                p.grad = None
            opt.step()
            for p, q in zip(model.parameters(), params):
                self.assertTrue(torch.equal(p, q), name)
            after = {k: v for st in opt.state.values() for k, v in st.items() if torch.is_tensor(v)}
            for k, v in state.items():
                self.assertTrue(torch.equal(after[k], v), "%s %s" % (name, k))


class DataOrderTest(unittest.TestCase):
    def order(self, loader):
        return [int(i) for b in loader for i in b[0]]

    def test_replicas_draw_their_own_order(self):
        ds = torch.utils.data.TensorDataset(torch.arange(32))
        orders = {}
        for rank in ("0", "1", "2"):
            loader = torch.utils.data.DataLoader(ds, batch_size=8, shuffle=True,
                                                 generator=torch.Generator().manual_seed(7))
            with mock.patch.dict(os.environ, {"HDET_SOCKET": "@s", "HDET_RANK": rank}):
                moved = _common.offset_data_order(loader)
            self.assertEqual(moved, 0 if rank == "0" else 1)
            orders[rank] = self.order(loader)
        plain = torch.utils.data.DataLoader(ds, batch_size=8, shuffle=True, generator=torch.Generator().manual_seed(7))
        self.assertEqual(orders["0"], self.order(plain), "replica 0 keeps the script's order")
        self.assertEqual(len({tuple(o) for o in orders.values()}), 3)

    @unittest.skipIf(transformers is None, "no accelerate")
    def test_accelerate_seedable_sampler(self):
        from accelerate.data_loader import SeedableRandomSampler

        s = SeedableRandomSampler(data_source=range(10), data_seed=5)
        loader = torch.utils.data.DataLoader(range(10), sampler=s)
        with mock.patch.dict(os.environ, {"HDET_SOCKET": "@s", "HDET_RANK": "2"}):
            _common.offset_data_order(loader)
        self.assertEqual(s.initial_seed, 5 + 2 * _common.SEED_STRIDE)


# -- Hugging Face ---------------------------------------------------------------


class Sequences(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        self.x = torch.randint(0, 32, (n, 8), generator=torch.Generator().manual_seed(seed))

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"input_ids": self.x[i], "labels": self.x[i]}


if transformers is not None:
    class SkippingTrainer(transformers.Trainer):
        """A Trainer with the GradScaler accelerate makes for fp16 on a GPU
        (here on the CPU, at scale 1), whose gradients are infinite at the
        global steps in skip_at: the scaler skips those steps."""

        skip_at: tuple = ()

        def create_accelerator_and_postprocess(self):
            super().create_accelerator_and_postprocess()
            self.accelerator.scaler = torch.amp.GradScaler("cpu", init_scale=1.0)

        def training_step(self, model, inputs, num_items_in_batch=None):
            loss = super().training_step(model, inputs, num_items_in_batch)
            if self.state.global_step in self.skip_at:
                next(model.parameters()).grad.fill_(float("inf"))
            return loss


@unittest.skipIf(transformers is None, "no transformers")
class TransformersTest(unittest.TestCase):
    def setUp(self):
        outside_hdet()
        self.dir = tempfile.mkdtemp()
        warnings.simplefilter("ignore")

    def trainer(self, callbacks, out="out", cls=None, max_steps=7, **kw):
        torch.manual_seed(0)
        config = transformers.GPT2Config(vocab_size=32, n_positions=8, n_embd=16, n_layer=1, n_head=2,
                                         bos_token_id=0, eos_token_id=0)
        model = transformers.GPT2LMHeadModel(config)
        kw = dict(dict(save_strategy="no"), **kw)
        args = transformers.TrainingArguments(
            output_dir=os.path.join(self.dir, out), max_steps=max_steps, per_device_train_batch_size=4,
            per_device_eval_batch_size=8, learning_rate=1e-2, lr_scheduler_type="cosine", warmup_steps=2,
            logging_steps=2, report_to="none", use_cpu=True, disable_tqdm=True, seed=0, **kw)
        return (cls or transformers.Trainer)(model=model, args=args, train_dataset=Sequences(48, 1),
                                             eval_dataset=Sequences(16, 2), callbacks=callbacks)

    def test_outside_hdet_changes_nothing(self):
        runs = []
        for callbacks in ([], [hf.HdetCallback()]):
            t = self.trainer(callbacks, out="run%d" % len(runs), save_strategy="steps", save_steps=3)
            t.train()
            runs.append(t)
        plain, with_cb = runs
        for (k, a), (_, b) in zip(plain.model.state_dict().items(), with_cb.model.state_dict().items()):
            self.assertTrue(torch.equal(a, b), k)
        strip = ("train_runtime", "train_samples_per_second", "train_steps_per_second")
        hist = [[{k: v for k, v in h.items() if k not in strip} for h in t.state.log_history] for t in runs]
        self.assertEqual(hist[0], hist[1])
        self.assertFalse(os.path.exists(os.path.join(self.dir, "run1", "hdet")))
        self.assertEqual(sorted(os.listdir(os.path.join(self.dir, "run1"))), ["checkpoint-3", "checkpoint-6",
                                                                              "checkpoint-7"])

    def test_arguments_are_checked(self):
        for kw, err, msg in [
            (dict(probe_examples=-1), ValueError, "probe_examples must be an int >= 0"),
            (dict(probe_examples=2.5), ValueError, "probe_examples"),
            (dict(probe="loss"), TypeError, "probe must be a function"),
            (dict(window=0), ValueError, "window must be in"),
            (dict(window="10"), TypeError, "window must be an int"),
            (dict(spread="log"), ValueError, "spread must be one of"),
            (dict(auto={"patience": 3}), ValueError, "unknown key 'patience'"),
            (dict(explore="lr"), TypeError, "explore must be a list"),
            (dict(report=3), TypeError, "report must be a file name"),
            (dict(dropout=0.1), TypeError, "dropout must be True"),
        ]:
            with self.assertRaisesRegex(err, msg, msg=kw):
                hf.HdetCallback(**kw)
        t = self.trainer([hf.HdetCallback(explore=["lr", "temperature"])])
        with self.assertRaisesRegex(ValueError, "cannot explore 'temperature'"):
            t.train()
        t = self.trainer([hf.HdetCallback(window=8)])
        with self.assertRaisesRegex(ValueError, r"window must be in \[1, total_steps=7\]"):
            t.train()

    def test_under_hdet(self):
        cb = hf.HdetCallback(probe_examples=12, probe_dataset=Sequences(16, 2))
        loaders = []

        class Loader(transformers.TrainerCallback):
            def on_train_begin(self, args, state, control, train_dataloader=None, **kw):
                loaders.append(train_dataloader)

        with fake_hdet(rank=1) as sessions:
            t = self.trainer([Loader(), cb], cls=SkippingTrainer, save_strategy="steps", save_steps=3)
            t.skip_at = (4,)
            t.train()
        s = sessions[-1]
        self.assertEqual(s.hello["total_steps"], 7, "max_steps")
        self.assertEqual(t.state.global_step, 7)
        self.assertEqual([d["steps"] for d in s.done_calls], [3, 3, 1], "every step the Trainer counted")
        self.assertEqual(cb._attached.skipped, 1)
        for k, d in enumerate(s.done_calls):
            self.assertEqual(d["applied"]["lr"], [PLAN[k]] * d["steps"])
            self.assertTrue(all(math.isfinite(x) for x in d["losses"]), d["losses"])
            self.assertTrue(math.isfinite(d["probe"]), "the probe on 12 evaluation items")
        # Replica 1's data order: accelerate's sampler seed (the Trainer's seed, 0) moved.
        seeds = [vars(o).get("initial_seed") for o in _common._walk(loaders[0]) if hasattr(o, "__dict__")]
        self.assertIn(_common.SEED_STRIDE, seeds)
        # Folders: replica 1 of the search pass writes under out/hdet/search/rank-1.
        out = os.path.join(self.dir, "out")
        self.assertEqual(t.args.output_dir, os.path.join(out, "hdet", "search", "rank-1"))
        self.assertEqual(os.listdir(out), ["hdet"])
        self.assertEqual(sorted(os.listdir(t.args.output_dir)), ["checkpoint-3", "checkpoint-6", "checkpoint-7"])
        self.assertFalse(os.path.exists(os.path.join(out, "hdet.json")), "only the main pass's rank 0 reports")
        # Logs: the values of the last step beside every training loss.
        hist = t.state.log_history
        losses = [h for h in hist if "loss" in h]
        self.assertEqual(len(losses), 3)
        for h in losses:  # the Trainer's learning_rate is the script's; hdet/lr the rate this replica applied
            self.assertEqual(h["hdet/pass"], 0)
            self.assertAlmostEqual(h["hdet/lr"], h["learning_rate"] * h["hdet/lr_multiplier"], places=12)
        # The checkpoint loads without hdet: nothing of it was pickled.
        ck = os.path.join(t.args.output_dir, "checkpoint-6")
        code = ("import sys; sys.modules['hdet'] = None; import torch, transformers; "
                "torch.load(%r, weights_only=True); torch.load(%r, weights_only=True); "
                "torch.load(%r, weights_only=False); transformers.GPT2LMHeadModel.from_pretrained(%r); print('ok')"
                % (os.path.join(ck, "optimizer.pt"), os.path.join(ck, "scheduler.pt"),
                   os.path.join(ck, "training_args.bin"), ck))
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        self.assertEqual(out.stdout.strip(), "ok", out.stderr[-2000:])

    def test_checkpoint_of_hdets_step(self):
        """At a relaunch hdet resumes at step S: the replica's checkpoint
        whose mark names this run, pass, replica and S; later ones move
        aside; none says what is wrong."""
        folder = os.path.join(self.dir, "ck")
        env = {"HDET_RANK": "1", "HDET_WORLD_SIZE": "2", "HDET_PASS": "main", "HDET_RUN_DIR": "/run"}
        with mock.patch.dict(os.environ, env):
            me = _common.identity()
            for g, mark in ((4, dict(me, hdet_step=4)), (8, dict(me, hdet_step=8)), (10, dict(me, hdet_step=10)),
                            (12, dict(me, replica=0, hdet_step=12))):
                os.makedirs(os.path.join(folder, "checkpoint-%d" % g))
                with open(os.path.join(folder, "checkpoint-%d" % g, "trainer_state.json"), "w") as f:
                    json.dump({"stateful_callbacks": {"hdet": mark}}, f)
            self.assertEqual(hf._checkpoint_of(folder, 8), (os.path.join(folder, "checkpoint-8"), 8))
            self.assertEqual(sorted(os.listdir(folder)), ["checkpoint-4", "checkpoint-8", "hdet-superseded"])
            self.assertEqual(transformers.trainer_utils.get_last_checkpoint(folder),
                             os.path.join(folder, "checkpoint-8"))
            with self.assertRaisesRegex(RuntimeError, r"hdet resumes this run at step 12 of the main pass, but this "
                                        r"replica's Trainer saved no checkpoint of that step .*checkpoint-4, "
                                        r"checkpoint-8"):
                hf._checkpoint_of(folder, 12)

    def test_accelerate_world_taken_apart(self):
        """TrainingArguments built before the callback's import: the world
        accelerate set up for them goes, and they see a one-process world.
        Also the test of the private parts of accelerate the callback reads
        (PartialState._shared_state, AcceleratorState._reset_state): it
        fails when they change."""
        d = torch.distributed
        d.init_process_group("gloo", store=d.HashStore(), rank=0, world_size=1)
        try:
            args = transformers.TrainingArguments(output_dir=self.dir, use_cpu=True, report_to="none")
            self.assertEqual(args.distributed_state.num_processes, 1)
            hidden = dict(_attach._process.hidden_env)
            # The world (1 process here) is not the replica's (2 here): accelerate's to take apart.
            with mock.patch.dict(os.environ), mock.patch.object(_session, "under_hdet", return_value=True), \
                    mock.patch.object(_common, "replica_size", return_value=2):
                self.assertTrue(hf.leave_accelerate_world())
                self.assertFalse(d.is_initialized())
                self.assertFalse(hf.leave_accelerate_world(), "nothing left to take apart")
            _attach._process.hidden_env.clear()
            _attach._process.hidden_env.update(hidden)
            self.assertEqual((args.world_size, args.process_index), (1, 0), "the arguments see the new world")
            self.assertEqual(args.distributed_state.device.type, "cpu")
            d.init_process_group("gloo", store=d.HashStore(), rank=0, world_size=1)
            self.assertFalse(hf.leave_accelerate_world(), "outside hdet: nothing")
            self.assertTrue(d.is_initialized())
        finally:
            if d.is_initialized():
                d.destroy_process_group()

    def test_main_pass_rank0_writes_where_asked(self):
        cb = hf.HdetCallback()
        with fake_hdet(rank=0, main=True):
            t = self.trainer([cb], save_strategy="steps", save_steps=7)
            t.train()
        out = os.path.join(self.dir, "out")
        self.assertEqual(t.args.output_dir, out)
        self.assertEqual(sorted(os.listdir(out)), ["checkpoint-7", "hdet.json"])
        with open(os.path.join(out, "hdet.json")) as f:
            report = json.load(f)
        self.assertEqual(report["pass"], "main")
        self.assertEqual(report["lr_multiplier"], 2.5)
        self.assertEqual(report["script_lr"], 1e-2)
        self.assertAlmostEqual(report["lr"], 2.5e-2)
        self.assertEqual(report["steps"], 7)
        main = [h for h in t.state.log_history if "loss" in h]
        self.assertTrue(all(h["hdet/committed_lr_multiplier"] == 2.5 for h in main))


# -- Lightning ------------------------------------------------------------------


if pl is not None:
    class Classifier(pl.LightningModule):
        def __init__(self, skip_at=()):
            super().__init__()
            self.net = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.ReLU(), torch.nn.Linear(16, 3))
            self.skip_at = skip_at

        def training_step(self, batch, i):
            x, y = batch
            loss = torch.nn.functional.cross_entropy(self.net(x), y)
            self.log("train_loss", loss)
            return loss

        def on_after_backward(self):
            if self.global_step in self.skip_at:
                next(self.parameters()).grad.fill_(float("inf"))

        def validation_step(self, batch, i):
            x, y = batch
            self.log("val_loss", torch.nn.functional.cross_entropy(self.net(x), y))

        def configure_optimizers(self):
            opt = torch.optim.AdamW(self.parameters(), lr=1e-2)
            sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=1e-2,
                                                        total_steps=self.trainer.estimated_stepping_batches)
            return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def blobs(n, seed):
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, 3, (n,), generator=g)
    return torch.utils.data.TensorDataset(torch.randn(n, 8, generator=g) + y[:, None].float(), y)


@unittest.skipIf(pl is None, "no lightning")
class LightningTest(unittest.TestCase):
    def setUp(self):
        outside_hdet()
        self.dir = tempfile.mkdtemp()
        warnings.simplefilter("ignore")

    def fit(self, callbacks, skip_at=(), plugins=None, root="out", ckpt_path=None, **kw):
        pl.seed_everything(0, verbose=False)
        model = Classifier(skip_at)
        ckpt = pl.callbacks.ModelCheckpoint(every_n_train_steps=3, save_top_k=-1, save_last=True)
        trainer = pl.Trainer(max_steps=7, accumulate_grad_batches=2, default_root_dir=os.path.join(self.dir, root),
                             callbacks=[*callbacks, ckpt], log_every_n_steps=1, enable_progress_bar=False,
                             enable_model_summary=False, accelerator="cpu", devices=1, plugins=plugins,
                             logger=pl.loggers.CSVLogger(os.path.join(self.dir, root)), **kw)
        train = torch.utils.data.DataLoader(blobs(128, 1), batch_size=8, shuffle=True)
        val = torch.utils.data.DataLoader(blobs(64, 2), batch_size=16)
        trainer.fit(model, train, val, ckpt_path=ckpt_path)
        return trainer, model

    def test_outside_hdet_changes_nothing(self):
        (_, a), (_, b) = self.fit([], root="a"), self.fit([hl.HdetCallback()], root="b")
        for (k, x), (_, y) in zip(a.state_dict().items(), b.state_dict().items()):
            self.assertTrue(torch.equal(x, y), k)
        with open(glob.glob(os.path.join(self.dir, "a", "lightning_logs", "*", "metrics.csv"))[0]) as f:
            plain = list(csv.reader(f))
        with open(glob.glob(os.path.join(self.dir, "b", "lightning_logs", "*", "metrics.csv"))[0]) as f:
            self.assertEqual(list(csv.reader(f)), plain)

    def test_arguments_are_checked(self):
        with self.assertRaisesRegex(ValueError, "probe_examples"):
            hl.HdetCallback(probe_examples=-3)
        with self.assertRaisesRegex(TypeError, "probe_metric must be"):
            hl.HdetCallback(probe_metric=1)
        with self.assertRaisesRegex(ValueError, "cannot explore 'momentum2'"):
            self.fit([hl.HdetCallback(explore=["momentum2"])])

    def test_under_hdet(self):
        scaler = torch.amp.GradScaler("cpu", init_scale=1.0)
        amp = pl.plugins.precision.MixedPrecision("16-mixed", "cpu", scaler=scaler)
        with fake_hdet(rank=1) as sessions:
            cb = hl.HdetCallback(probe_examples=40)  # under hdet (its import is, in a real run)
            trainer, _ = self.fit([cb], skip_at=(2,), plugins=[amp])
        s = sessions[-1]
        self.assertEqual(s.hello["total_steps"], 7, "estimated_stepping_batches (accumulating 2 batches)")
        self.assertEqual(trainer.global_step, 7)
        self.assertEqual([d["steps"] for d in s.done_calls], [3, 3, 1])
        self.assertEqual(cb._attached.skipped, 1)
        for k, d in enumerate(s.done_calls):
            self.assertEqual(d["applied"]["lr"], [PLAN[k]] * d["steps"])
            self.assertTrue(math.isfinite(d["probe"]), "the probe on 40 validation items")
        root = os.path.join(self.dir, "out")
        mine = os.path.join(root, "hdet", "search", "rank-1")
        self.assertEqual(os.listdir(root), ["hdet"], "nothing where the main pass's rank 0 writes")
        logs = glob.glob(os.path.join(mine, "lightning_logs", "version_0", "metrics.csv"))
        self.assertEqual(len(logs), 1)
        ckpts = sorted(os.path.basename(p) for p in glob.glob(os.path.join(mine, "lightning_logs", "version_0",
                                                                           "checkpoints", "*.ckpt")))
        self.assertEqual(ckpts, ["epoch=0-step=3.ckpt", "epoch=0-step=6.ckpt", "last.ckpt"])
        with open(logs[0]) as f:
            rows = list(csv.DictReader(f))
        mult = [float(r["hdet/lr_multiplier"]) for r in rows if r.get("hdet/lr_multiplier")]
        self.assertEqual(sorted(set(mult)), sorted(set(PLAN[:3])))
        self.assertTrue(all(r.get("hdet/lr") for r in rows if r.get("hdet/lr_multiplier")))
        # The checkpoint loads without hdet.
        code = ("import sys; sys.modules['hdet'] = None; import torch; "
                "ck = torch.load(%r, weights_only=False); print(sorted(ck['state_dict']))"
                % os.path.join(mine, "lightning_logs", "version_0", "checkpoints", "last.ckpt"))
        out = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True)
        self.assertIn("net.0.weight", out.stdout, out.stderr[-2000:])

    def test_resumes_a_checkpoint_of_its_own(self):
        """A fit resumed (ckpt_path) from a checkpoint written without hdet
        starts hdet's run from that state on purpose: the client does not
        take it for a search pass's checkpoint."""
        self.fit([], root="plain")
        ckpt = glob.glob(os.path.join(self.dir, "plain", "lightning_logs", "*", "checkpoints", "epoch=0-step=3.ckpt"))
        self.assertEqual(len(ckpt), 1)
        for main in (False, True):
            with self.subTest(main=main), fake_hdet(rank=1, main=main) as sessions:
                trainer, _ = self.fit([hl.HdetCallback(probe_examples=0)], root="main%d" % main, ckpt_path=ckpt[0])
                self.assertEqual(trainer.global_step, 7)
                self.assertEqual(sessions[-1].hello["total_steps"], 4, "the steps left after step 3")
                self.assertEqual(sum(d["steps"] for d in sessions[-1].done_calls), 4)

    def test_resumes_at_hdets_step(self):
        """The private part of Lightning the callback sets at a relaunch that
        hdet resumes (HdetCallback._load_resume, tested with Lightning
        2.6.6): the Trainer's _checkpoint_connector._loaded_checkpoint, which
        resume_start(None) (no ckpt_path) leaves as it is and the restores
        after the setup hooks read. This fails when that changes."""
        trainer = pl.Trainer(max_steps=1, enable_progress_bar=False, enable_model_summary=False, logger=False,
                             default_root_dir=self.dir)
        conn = trainer._checkpoint_connector
        self.assertIsInstance(conn._loaded_checkpoint, dict)
        ours = {"global_step": 3}
        conn._loaded_checkpoint = ours
        conn.resume_start(None)
        self.assertIs(conn._loaded_checkpoint, ours)
        for name in ("_restore_modules_and_callbacks", "restore_training_state", "resume_end"):
            self.assertTrue(callable(getattr(conn, name, None)), name)
        src = inspect.getsource(type(trainer)._run)
        self.assertLess(src.index("_call_setup_hook"), src.index("_restore_modules_and_callbacks"),
                        "the callbacks' setup runs before the restore")

    def test_main_pass_rank0_writes_where_asked(self):
        with fake_hdet(rank=0, main=True):
            self.fit([hl.HdetCallback(probe_examples=0)])
        root = os.path.join(self.dir, "out")
        self.assertEqual(sorted(os.listdir(root)), ["hdet.json", "lightning_logs"])
        with open(os.path.join(root, "hdet.json")) as f:
            report = json.load(f)
        self.assertEqual(report["lr_multiplier"], 2.5)
        self.assertAlmostEqual(report["peak_lr"], 2.5 * report["script_peak_lr"])
        self.assertLessEqual(report["script_peak_lr"], 1e-2 + 1e-12)


if __name__ == "__main__":
    unittest.main()
