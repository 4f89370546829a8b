"""hdet.attach: outside hdet the line changes nothing (the parameters after N
steps are bitwise those without it); under hdet (a stand-in for hdet's
session, in process) each step runs at the script's rate x the planned
multiplier, read inside the step, and the script's own value is back right
after it, whatever sets the rate; bad use is refused with a message naming
what is wrong."""

import gc
import math
import os
import sys
import unittest
import warnings
import weakref
from unittest import mock

import torch
import torch.nn.functional as F
from torch.optim import lr_scheduler

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # test the checkout
import hdet
from hdet import _attach, _session

STEPS = 12
SCHEDULES = ["lambda-wsd", "cosine", "sequential", "onecycle", "hdet-onecycle", "manual", "constant"]
OPTIMIZERS = ["adamw", "adam", "sgd"]
IMPLS = ["default", "foreach", "fused"]
LRS = [0.01, 0.003]  # the groups' own rates: different


def wsd(step, total=STEPS, warmup=2, decay=3):
    if step < warmup:
        return (step + 1) / (warmup + 1)
    return min(1.0, (total - step) / (decay + 1))


class Schedule:
    """One way a script sets its learning rate: before(it) ahead of each
    optimizer step (a manual loop's `g["lr"] = ...`), after() once the
    optimizer has stepped (a scheduler's step())."""

    def __init__(self, name, opt, iters):
        self.name, self.opt, self.sched = name, opt, None
        self.initial = [g["lr"] for g in opt.param_groups]
        maxes = [float(lr) for lr in self.initial]
        if name == "lambda-wsd":
            self.sched = lr_scheduler.LambdaLR(opt, lambda s: wsd(s, iters))
        elif name == "cosine":
            self.sched = lr_scheduler.CosineAnnealingLR(opt, T_max=iters, eta_min=1e-4)
        elif name == "sequential":
            self.sched = lr_scheduler.SequentialLR(opt, [lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=3),
                                                         lr_scheduler.CosineAnnealingLR(opt, T_max=iters - 3)],
                                                   milestones=[3])
        elif name == "onecycle":
            self.sched = lr_scheduler.OneCycleLR(opt, max_lr=maxes, total_steps=iters)
        elif name == "hdet-onecycle":
            self.sched = hdet.OneCycleLR(opt, max_lr=maxes, total_steps=iters)
        self.maxes, self.iters = maxes, iters

    def before(self, it):
        if self.name == "manual":  # nanoGPT: warm-up, then cosine, set by hand every iteration
            f = (it + 1) / 3 if it < 2 else 0.1 + 0.45 * (1 + math.cos(math.pi * (it - 2) / (self.iters - 2)))
            for g, m in zip(self.opt.param_groups, self.maxes):
                g["lr"] = m * f

    def after(self):
        if self.sched is not None:
            self.sched.step()


def make_optimizer(kind, impl="default", groups=1, tensor_lr=False, names=False):
    torch.manual_seed(0)
    model = torch.nn.Sequential(torch.nn.Linear(4, 8), torch.nn.Tanh(), torch.nn.Linear(8, 2))
    opts = {"foreach": {"foreach": True}, "fused": {"fused": True}}.get(impl, {})
    if groups == 1:
        spec = [{"params": model.parameters()}]
    else:
        spec = [{"params": model[0].parameters(), "lr": LRS[0], "weight_decay": 0.05},
                {"params": model[2].parameters(), "lr": LRS[1], "weight_decay": 0.0}]
        if names:
            spec[0]["name"], spec[1]["name"] = "body", "head"
    lr = torch.tensor(LRS[0], dtype=torch.float64) if tensor_lr else LRS[0]
    if kind == "adamw":
        opt = torch.optim.AdamW(spec, lr=lr, **opts)
    elif kind == "adam":
        opt = torch.optim.Adam(spec, lr=lr, **opts)
    else:
        opt = torch.optim.SGD(spec, lr=lr, momentum=0.9, **opts)
    return model, opt


def lrs_of(opt):
    return [float(g["lr"]) for g in opt.param_groups]


def train(schedule="constant", kind="adamw", impl="default", groups=1, accum=1, steps=STEPS, attach=False,
          tensor_lr=False, names=False, scaler_skip=-1, **attach_kw):
    """Train a tiny MLP as a script would; returns (parameters, the script's
    rates before each iteration's step, what the script's own step pre-hook
    saw at each step call: {"script": its rates, "inside": the rates in the
    step, "skipped": GradScaler skips it (a fused step)}, the optimizer)."""
    model, opt = make_optimizer(kind, impl, groups, tensor_lr, names)
    if attach:
        assert hdet.attach(opt, steps, **attach_kw) is opt
    iters = steps + (scaler_skip >= 0)  # a step AMP skips is not one of total_steps
    sched = Schedule(schedule, opt, iters)
    calls, script = [], []

    def hook(o, args, kwargs):
        found = getattr(o, "found_inf", None)  # GradScaler's, around a fused step
        calls.append({"script": list(script), "inside": lrs_of(o),
                      "skipped": bool(torch.is_tensor(found) and found.item() != 0)})

    opt.register_step_pre_hook(hook)
    scaler = torch.amp.GradScaler("cpu") if scaler_skip >= 0 else None
    gen = torch.Generator().manual_seed(1)
    bases = []
    for it in range(iters):
        sched.before(it)
        for _ in range(accum):
            x = torch.randn(16, 4, generator=gen)
            loss = F.mse_loss(model(x), x[:, :2].sin()) / accum
            (scaler.scale(loss) if scaler else loss).backward()
        if it == scaler_skip:
            model[0].weight.grad[0, 0] = float("inf")
        bases.append(lrs_of(opt))
        script[:] = bases[-1]
        if scaler:
            scaler.step(opt)
            scaler.update()
        else:
            opt.step()
        opt.zero_grad(set_to_none=True)
        sched.after()
    return [p.detach().clone() for p in model.parameters()], bases, calls, opt


def assert_bitwise(test, a, b, msg):
    test.assertEqual(len(a), len(b))
    for x, y in zip(a, b):
        test.assertTrue(torch.equal(x, y), msg)


def quiet():
    """torch warns about the scheduler's first step when AMP skips the optimizer's."""
    w = warnings.catch_warnings()
    w.__enter__()
    warnings.simplefilter("ignore", UserWarning)
    return w


class OutsideHdetTest(unittest.TestCase):
    """Without HDET_SOCKET the attach line installs nothing."""

    def setUp(self):
        os.environ.pop("HDET_SOCKET", None)
        self.w = quiet()

    def tearDown(self):
        self.w.__exit__(None, None, None)

    def test_bitwise_equal_for_every_schedule_optimizer_and_implementation(self):
        for schedule in SCHEDULES:
            for kind in OPTIMIZERS:
                for impl in IMPLS:
                    with self.subTest(schedule=schedule, optimizer=kind, impl=impl):
                        # hdet.OneCycleLR attaches itself: compared with torch's.
                        plain = train("onecycle" if schedule == "hdet-onecycle" else schedule, kind, impl)
                        with_line = train(schedule, kind, impl, attach=schedule != "hdet-onecycle")
                        assert_bitwise(self, plain[0], with_line[0], "parameters")
                        self.assertEqual(plain[1], with_line[1], "the script's rates")
                        self.assertEqual(plain[2], with_line[2], "the rates inside each step")
                        self.assertTrue(all(c["inside"] == c["script"] for c in plain[2]))

    def test_bitwise_equal_with_groups_accumulation_tensor_lr_and_amp(self):
        cases = [
            dict(schedule="cosine", groups=2),
            dict(schedule="manual", groups=2, names=True, kind="sgd", impl="foreach"),
            dict(schedule="onecycle", groups=2, kind="adam", impl="fused"),
            dict(schedule="lambda-wsd", accum=4),
            dict(schedule="sequential", accum=3, groups=2, impl="fused"),
            dict(schedule="constant", tensor_lr=True),
            dict(schedule="cosine", tensor_lr=True, impl="fused", kind="adam"),
            dict(schedule="lambda-wsd", impl="fused", scaler_skip=4),
        ]
        for kw in cases:
            with self.subTest(**kw):
                plain, with_line = train(**kw), train(attach=True, **kw)
                assert_bitwise(self, plain[0], with_line[0], "parameters")
                self.assertEqual(plain[1], with_line[1])

    def test_attach_returns_the_optimizer_unwrapped(self):
        _, opt = make_optimizer("adamw")
        step = opt.step
        self.assertIs(hdet.attach(opt, 10), opt)
        self.assertEqual(opt.step, step, "step is not wrapped outside hdet")
        self.assertFalse(opt._optimizer_step_pre_hooks, "no hook outside hdet")
        self.assertIsNone(hdet.current(opt))


class FakeSession:
    """hdet's side of one rank, in process: windows of `window` steps whose
    planned values come from plan(name, step); records what the script
    reported."""

    def __init__(self, optimizer, hello, total, window, plan):
        self.optimizer, self.hello, self.total, self.window, self.plan = optimizer, hello, total, window, plan
        self.params = [p for g in optimizer.param_groups for p in g["params"]]
        self.finished = False
        self.start = 0
        self.done_calls = []
        self.reported = None

    def next_message(self, evaluate):
        if self.start >= self.total:
            self.finished = True
            return None
        steps = min(self.window, self.total - self.start)
        values = {name: [self.plan(name, self.start + j) for j in range(steps)]
                  for name in (e["name"] for e in self.hello["explore"])}
        msg = {"type": "plan", "window": len(self.done_calls), "start": self.start, "steps": steps,
               "values": values, "pass": 0, "probe_tail": 0}
        self.start += steps
        return msg

    def hand_over(self):
        pass

    def done(self, window, steps, losses, applied, base_lr, probe=None):
        self.done_calls.append(dict(window=window, steps=steps, losses=losses, applied=applied, base_lr=base_lr))

    def trace(self, **record):
        pass

    def report(self, message):
        self.finished = True
        self.reported = message

    def fail(self, why):
        self.report(why)
        raise hdet.ProtocolError("hdet: " + why)


def fresh():
    """A new process state for hdet's client: nothing attached, no probe."""
    run = _attach._process.run
    if run is not None:
        run.recorder.close()  # the previous test's run, if it did not end: its wrappers go
    _attach._process = _attach._Process()
    _attach._process.hooked = True  # no excepthook or atexit from a test


def multiplier(name, step):
    """The fake plan: a multiplier that changes every step (1 at some)."""
    offset = {"lr": 0, "lr/0": 1, "lr/body": 1, "lr/1": 2, "lr/head": 2}.get(name, 0)
    return 0.5 + 0.25 * ((step + offset) % 5)


class UnderHdetTest(unittest.TestCase):
    """attach under a stand-in for hdet's session (no hdet process)."""

    def setUp(self):
        self.saved = _attach._process
        fresh()
        self.sessions = []
        self.w = quiet()

        def session(optimizer, hello):
            s = FakeSession(optimizer, hello, hello["total_steps"], self.window, multiplier)
            self.sessions.append(s)
            return s

        self.window = 5
        self.patches = [mock.patch.object(_session, "under_hdet", return_value=True),
                        mock.patch.object(_session, "Session", session)]
        for p in self.patches:
            p.start()

    def tearDown(self):
        for p in self.patches:
            p.stop()
        _attach._process = self.saved
        self.w.__exit__(None, None, None)

    def expected_multipliers(self, explore, groups):
        """Each step's multiplier of each group."""
        names = [e if isinstance(e, str) else e["name"] for e in explore]
        out = []
        for step in range(STEPS):
            m = [1.0] * groups
            for n in names:
                if n == "lr":
                    m = [x * multiplier(n, step) for x in m]
                elif n.startswith("lr/"):
                    k = n[3:]
                    i = {"body": 0, "head": 1}.get(k, None)
                    i = int(k) if i is None else i
                    m[i] *= multiplier(n, step)
            out.append(m)
        return out

    def check_run(self, explore=("lr",), **kw):
        """Train under the fake hdet and outside it; the script's rates must
        be the same in both, the rates inside each step base x multiplier,
        and nothing multiplied left behind. Returns the parameters under
        hdet and outside, and what the script reported."""
        fresh()
        if kw.get("schedule") == "hdet-onecycle":  # it attaches itself, exploring "lr"
            params, bases, calls, opt = train(**kw)
        else:
            params, bases, calls, opt = train(attach=True, explore=list(explore), **kw)
        done = self.sessions[-1].done_calls
        with mock.patch.object(_session, "under_hdet", return_value=False):
            fresh()
            ref_params, ref_bases, _, ref_opt = train(**kw)
        self.assertEqual(bases, ref_bases, "the script's own rates are those it sets outside hdet")
        self.assertEqual(lrs_of(opt), lrs_of(ref_opt), "after the last step the groups hold the script's rates")
        steps = [c for c in calls if not c["skipped"]]  # a fused step GradScaler skips is no hdet step
        self.assertEqual(len(steps), STEPS)
        mults = self.expected_multipliers(explore, kw.get("groups", 1))
        for step, (c, m) in enumerate(zip(steps, mults)):
            for k, (g, b, x) in enumerate(zip(c["inside"], c["script"], m)):
                self.assertTrue(math.isclose(g, b * x, rel_tol=1e-12),
                                "step %d group %d: %r inside, want %r x %r" % (step, k, g, b, x))
        self.assertEqual(sum(d["steps"] for d in done), STEPS, "one hdet step per optimizer step")
        self.assertEqual(sum(len(d["losses"]) for d in done), STEPS, "one loss per step")
        self.assertEqual([b for d in done for b in d["base_lr"]], [c["script"][0] for c in steps],
                         "base_lr: the script's rate of group 0 at each step")
        for name in (e if isinstance(e, str) else e["name"] for e in explore):
            self.assertEqual([v for d in done for v in d["applied"][name]], [multiplier(name, s) for s in range(STEPS)])
        return params, ref_params, done

    def test_each_schedule_runs_at_base_times_multiplier(self):
        for schedule in SCHEDULES:
            for kind, impl in (("adamw", "default"), ("sgd", "foreach"), ("adam", "fused")):
                with self.subTest(schedule=schedule, optimizer=kind, impl=impl):
                    params, plain, _ = self.check_run(schedule=schedule, kind=kind, impl=impl)
                    self.assertFalse(all(torch.equal(a, b) for a, b in zip(params, plain)),
                                     "the multipliers changed the training")

    def test_param_groups_one_multiplier_or_one_each(self):
        self.check_run(schedule="cosine", groups=2)
        self.check_run(schedule="manual", groups=2, explore=["lr/0", "lr/1"])
        self.check_run(schedule="lambda-wsd", groups=2, names=True, explore=["lr/body", "lr/head"], impl="fused")
        self.check_run(schedule="onecycle", groups=2, names=True, explore=["lr/head"], kind="sgd")

    def test_gradient_accumulation_is_one_step(self):
        _, _, done = self.check_run(schedule="sequential", accum=4)
        model, _ = make_optimizer("adamw")
        gen = torch.Generator().manual_seed(1)
        with torch.no_grad():
            first = sum(float(F.mse_loss(model(x), x[:, :2].sin()) / 4)
                        for x in (torch.randn(16, 4, generator=gen) for _ in range(4)))
        self.assertTrue(math.isclose(done[0]["losses"][0], first, rel_tol=1e-5),
                        "the step's loss is the sum of its micro-batches' (%r, want %r)" % (done[0]["losses"][0], first))

    def test_load_state_dict_before_or_after_attach_and_after_a_scheduler(self):
        """A script that resumes its own checkpoint: optimizer.load_state_dict
        replaces the param groups, before or after the attach line, and
        after a scheduler is built (issue 50's "param group 0's learning
        rate inside optimizer.step() was ..."). Every step still runs at the
        script's rate x the plan, and the script's rates are those it has
        outside hdet."""
        _, saved_opt = make_optimizer("adamw", groups=2)
        saved_sched = lr_scheduler.CosineAnnealingLR(saved_opt, T_max=STEPS, eta_min=1e-4)
        for _ in range(3):
            for p in (p for g in saved_opt.param_groups for p in g["params"]):
                p.grad = torch.ones_like(p)
            saved_opt.step()
            saved_sched.step()
        ckpt = {"opt": saved_opt.state_dict(), "sched": saved_sched.state_dict()}

        def resume(order):
            model, opt = make_optimizer("adamw", groups=2)
            if order == "before":
                opt.load_state_dict(ckpt["opt"])
            # start_step=0: the run means to start from that state (without it
            # the client stops a launch hdet did not resume whose optimizer
            # has taken steps: test_resume.py)
            hdet.attach(opt, STEPS - 3, start_step=0)
            sched = lr_scheduler.CosineAnnealingLR(opt, T_max=STEPS, eta_min=1e-4)
            sched.load_state_dict(ckpt["sched"])
            if order != "before":
                opt.load_state_dict(ckpt["opt"])  # after attach and after the scheduler
            inside = []
            opt.register_step_pre_hook(lambda o, a, k: inside.append(lrs_of(o)))
            script, gen = [], torch.Generator().manual_seed(1)
            for _ in range(STEPS - 3):
                x = torch.randn(16, 4, generator=gen)
                F.mse_loss(model(x), x[:, :2].sin()).backward()
                script.append(lrs_of(opt))
                opt.step()
                opt.zero_grad(set_to_none=True)
                sched.step()
            return script, inside

        for order in ("before", "after"):
            with self.subTest(order=order):
                fresh()
                script, inside = resume(order)
                with mock.patch.object(_session, "under_hdet", return_value=False):
                    fresh()
                    ref_script, ref_inside = resume(order)
                self.assertEqual(script, ref_script, "the script's own rates are those it has outside hdet")
                self.assertEqual(ref_inside, ref_script)
                self.assertNotEqual(script[0], lrs_of(make_optimizer("adamw", groups=2)[1]), "the loaded rates")
                for step, (got, base) in enumerate(zip(inside, script)):
                    for g, b in zip(got, base):
                        self.assertTrue(math.isclose(g, b * multiplier("lr", step), rel_tol=1e-12),
                                        "step %d: %r inside, want %r x %r" % (step, g, b, multiplier("lr", step)))

    def test_amp_skipped_step_is_not_an_hdet_step(self):
        self.check_run(schedule="lambda-wsd", impl="fused", scaler_skip=3)

    def test_amp_skip_of_an_unfused_step_records_no_loss(self):
        # GradScaler does not call an unfused optimizer's step when it
        # skips: the loss backward() recorded for it must not be added to
        # the next step's.
        _, _, done = self.check_run(schedule="cosine", impl="default", scaler_skip=3)
        losses = done[0]["losses"]
        self.assertLess(losses[3], 1.5 * losses[2], "step 3's loss holds the skipped iteration's too: %r" % losses)

    def test_tensor_lr_changed_in_place(self):
        self.check_run(schedule="constant", tensor_lr=True)
        self.check_run(schedule="cosine", tensor_lr=True, kind="adam", impl="fused")
        fresh()
        _, opt = make_optimizer("adam", "fused", tensor_lr=True)
        lr = opt.param_groups[0]["lr"]
        hdet.attach(opt, STEPS)
        seen = []
        opt.register_step_pre_hook(lambda o, a, k: seen.append((o.param_groups[0]["lr"] is lr, float(lr))))
        for p in opt.param_groups[0]["params"]:
            p.grad = torch.ones_like(p)
        torch.tensor(1.0, requires_grad=True).backward()  # the step's loss
        opt.step()
        self.assertEqual(seen, [(True, LRS[0] * multiplier("lr", 0))], "the same tensor, multiplied, inside")
        self.assertIs(opt.param_groups[0]["lr"], lr, "never replaced")
        self.assertEqual(float(lr), LRS[0], "its value restored after the step")

    def test_a_step_that_raises_leaves_the_scripts_rate(self):
        _, opt = make_optimizer("sgd", groups=2)
        hdet.attach(opt, STEPS)
        for g in opt.param_groups:
            for p in g["params"]:
                p.grad = torch.ones_like(p)

        def closure():
            raise ValueError("the closure fails")

        with self.assertRaisesRegex(ValueError, "the closure fails"):
            opt.step(closure)
        self.assertEqual(lrs_of(opt), LRS, "no multiplied rate left behind")

    def test_more_steps_than_total_steps(self):
        model, opt = make_optimizer("sgd")
        hdet.attach(opt, 3, window=3)
        for _ in range(3):
            F.mse_loss(model(torch.ones(2, 4)), torch.zeros(2, 2)).backward()
            opt.step()
        F.mse_loss(model(torch.ones(2, 4)), torch.zeros(2, 2)).backward()
        with self.assertRaisesRegex(RuntimeError, r"optimizer step 4 is past total_steps=3 given to hdet.attach"):
            opt.step()

    def test_current_and_callbacks(self):
        seen = []
        model, opt = make_optimizer("adamw")
        hdet.attach(opt, STEPS, explore=["lr", {"name": "temperature", "base": 1.0}],
                    callbacks={"temperature": seen.append})
        self.assertIsNone(hdet.current(torch.optim.SGD(model.parameters(), lr=0.1)), "another optimizer")
        F.mse_loss(model(torch.ones(2, 4)), torch.zeros(2, 2)).backward()
        opt.step()
        status = hdet.current()
        self.assertEqual((status["step"], status["total_steps"], status["pass"]), (1, STEPS, "search"))
        self.assertEqual(status["lr_multiplier"], multiplier("lr", 1))
        self.assertEqual(status["script_peak_lr"], lrs_of(opt)[0], "the script's own rate, not multiplied")
        self.assertEqual(seen, [multiplier("temperature", 0), multiplier("temperature", 1)],
                         "a callback's value is set before the step it shapes")

    def test_one_optimizer_per_process(self):
        _, a = make_optimizer("adamw")
        _, b = make_optimizer("adamw")
        hdet.attach(a, STEPS)
        with self.assertRaisesRegex(RuntimeError, "hdet runs one optimizer per process"):
            hdet.attach(b, STEPS)

    def test_nothing_of_hdet_holds_the_script_after_the_run(self):
        """After hdet's STOP a script that drops its optimizer frees it (and
        its parameters and state), as it would without hdet."""
        _, _, _, opt = train(attach=True)
        self.assertTrue(self.sessions[0].finished)
        self.assertEqual(hdet.current(opt)["step"], STEPS, "while the script holds its optimizer")
        ref = weakref.ref(opt)
        self.sessions.clear()  # the stand-in for hdet's session holds the optimizer
        del opt
        gc.collect()
        self.assertIsNone(ref(), "the optimizer outlived the script's last reference")
        self.assertIsNone(hdet.current())
        _, again = make_optimizer("adamw")
        with self.assertRaisesRegex(RuntimeError, "hdet runs one optimizer per process, and this process's run under hdet is over"):
            hdet.attach(again, STEPS)


class BadUseTest(unittest.TestCase):
    """Refused inside or outside hdet, with the reason."""

    def setUp(self):
        os.environ.pop("HDET_SOCKET", None)
        self.saved = _attach._process
        _attach._process = _attach._Process()

    def tearDown(self):
        _attach._process = self.saved

    def test_total_steps_must_be_a_positive_int(self):
        for bad, kind in ((0, ValueError), (-5, ValueError), (2.5, TypeError), (10.0, TypeError), (True, TypeError),
                          ("100", TypeError), (None, TypeError)):
            with self.subTest(total_steps=bad):
                _, opt = make_optimizer("adamw")
                with self.assertRaisesRegex(kind, "total_steps must be a positive int"):
                    hdet.attach(opt, bad)

    def test_attach_twice(self):
        _, opt = make_optimizer("adamw")
        hdet.attach(opt, 10)
        with self.assertRaisesRegex(RuntimeError, "already attached by hdet.attach; attach it once"):
            hdet.attach(opt, 10)

    def test_attach_and_hdet_onecycle_on_one_optimizer(self):
        _, opt = make_optimizer("adamw")
        hdet.attach(opt, 10)
        with self.assertRaisesRegex(RuntimeError, "already attached by hdet.attach"):
            hdet.OneCycleLR(opt, max_lr=0.1, total_steps=10)
        _, opt = make_optimizer("adamw")
        hdet.OneCycleLR(opt, max_lr=0.1, total_steps=10)
        with self.assertRaisesRegex(RuntimeError, "already attached by hdet.OneCycleLR"):
            hdet.attach(opt, 10)

    def test_optimizer_without_param_groups(self):
        _, opt = make_optimizer("adamw")
        opt.param_groups.clear()
        with self.assertRaisesRegex(ValueError, "the optimizer has no param groups"):
            hdet.attach(opt, 10)

    def test_not_an_optimizer(self):
        model, _ = make_optimizer("adamw")
        with self.assertRaisesRegex(TypeError, "optimizer must be a torch.optim.Optimizer, got Sequential"):
            hdet.attach(model, 10)

    def test_explore_names_that_do_not_exist(self):
        for explore in (["lr/2"], ["lr/0"], ["weight_decay/tail"], ["dropout"], ["temperature"], ["LR"], ["betas"]):
            with self.subTest(explore=explore):
                _, opt = make_optimizer("sgd", groups=2, names=True)  # named groups are explored by name
                with self.assertRaisesRegex(ValueError, r"cannot explore %r; this optimizer and these callbacks offer "
                                            r"\['lr', " % explore[0]):
                    hdet.attach(opt, 10, explore=explore)
        _, opt = make_optimizer("sgd", groups=2, names=True)
        hdet.attach(opt, 10, explore=["lr/body", "weight_decay/head", "momentum"])
        _, opt = make_optimizer("adamw")
        rms = torch.optim.Rprop(opt.param_groups[0]["params"], lr=0.01)
        with self.assertRaisesRegex(ValueError, "cannot explore 'weight_decay'"):
            hdet.attach(rms, 10, explore=["weight_decay"])  # Rprop has none

    def test_tensor_lr_is_supported(self):
        _, opt = make_optimizer("adam", "fused", tensor_lr=True)
        self.assertIs(hdet.attach(opt, 10), opt)


if __name__ == "__main__":
    unittest.main()
