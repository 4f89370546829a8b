"""hdet.attach: one line that runs any PyTorch training loop under hdet.

Under `hdet run --worker`, attach wraps the optimizer's step (this instance
only): whatever rate the script (its scheduler, or its own loop) has put in
each param group when step() is called is the base; the step runs at base x
this rank's planned multiplier, and the group's own value is put back right
after it, also when the step raises. The step that completes a window hands
the parameters to hdet, which averages them across ranks, and loads the
average back before returning. Outside hdet attach checks its arguments and
installs nothing.
"""

from __future__ import annotations

import atexit
import math
import random
import sys
import time
import traceback
import types
import weakref
from collections.abc import Sequence
from typing import Any, Callable, NoReturn

import torch
from torch.optim import lr_scheduler

from . import _args, _loss, _resume, _session
from ._values import Saved, Values, as_float, dropout_setter, group_keys, restore


class _Process:
    """What this process holds for hdet: the probe registered before attach,
    which optimizers are attached, and the one attachment that talks to hdet
    (one connection per process)."""

    def __init__(self) -> None:
        self.probe: Callable[[], float] | None = None
        self.attached: weakref.WeakKeyDictionary[torch.optim.Optimizer, str] = weakref.WeakKeyDictionary()
        self._run: Attachment | None = None
        self._ended: weakref.ref[Attachment] | None = None
        self.hooked = False
        self.start_step: int | None = None  # set by attach: hdet.start_step()

    @property
    def run(self) -> Attachment | None:
        """The attachment: held while its run is on; once it is over, only
        as long as the script holds the optimizer (its step wrapper holds
        the attachment), so the script can free its model and optimizer."""
        if self._run is not None:
            return self._run
        return self._ended() if self._ended is not None else None

    def start(self, run: Attachment) -> None:
        self._run = run

    def end(self) -> None:
        if self._run is not None:
            self._ended = weakref.ref(self._run)
            self._run = None

    @property
    def ended(self) -> bool:
        return self._ended is not None


_process = _Process()


def register_probe(fn: Callable[[], float] | None) -> Callable[[], float] | None:
    if fn is not None and not callable(fn):
        raise TypeError("hdet.probe: %r is not callable" % (fn,))
    _process.probe = fn
    return fn


def attach(optimizer: torch.optim.Optimizer, total_steps: int, *, window: int | None = None,
           explore: Sequence[Any] | None = None, alpha: float | None = None, spread: str | None = None,
           auto: dict[str, Any] | None = None, dropout: Any = None,
           callbacks: dict[str, Callable[[float], Any]] | None = None,
           evaluate: Callable[[], Sequence[float]] | None = None, probe: Callable[[], float] | None = None,
           state: dict[str, Any] | None = None, start_step: int | None = None,
           _by: str = "hdet.attach") -> torch.optim.Optimizer:
    """Run this optimizer's training under hdet; returns the optimizer.

    One line right after the optimizer is built::

        optimizer = hdet.attach(torch.optim.AdamW(model.parameters(), lr=6e-4), total_steps=max_iters)

    total_steps: the number of optimizer steps the script takes (under
      gradient accumulation, optimizer steps, not micro-batches; a step that
      AMP's GradScaler skips does not count).
    window: steps per window T (train.window); default: hdet chooses.
    explore: what to explore: names or dicts (name, alpha, spread, lower,
      upper, base, plugin). Names: "lr" (a multiplier of every group's rate),
      "lr/KEY" (one group's: KEY is its "name" entry, else its index),
      "weight_decay", "weight_decay/KEY", "momentum", "dropout", and the
      names of callbacks. Default: "lr", plus "dropout" when dropout is given.
    alpha, spread, auto: every explored hyperparameter's spread width and
      kind, and the lr explorer's auto block (docs/pytorch.md).
    dropout: a module (every nn.Dropout in it is set) or a function(p).
    callbacks: {name: function(value)} for any other scalar (a custom
      explore entry gives its base).
    evaluate: function() -> (test loss, accuracy) for hdet's evaluations.
    probe: function() -> loss on fixed examples (see hdet.probe).
    state: {name: object with state_dict()/load_state_dict()} (model,
      scheduler, StatefulDataLoader, a train-state object): hdet saves them
      with the optimizer at its checkpoints and, on a relaunch, loads them
      before attach returns; the loop continues at hdet.start_step().
    start_step: the step the script's own checkpoint resumed (a script that
      restores itself); hdet checks it is the step hdet resumes.

    Outside hdet (no HDET_SOCKET) the arguments are checked and nothing is
    installed: the script runs bit for bit as without the line."""
    prev = _process.attached.get(optimizer) if isinstance(optimizer, torch.optim.Optimizer) else None
    if prev is not None:
        raise RuntimeError("%s: this optimizer is already attached by %s; attach it once (hdet.OneCycleLR attaches "
                           "its optimizer itself)" % (_by, prev))
    total, values, settings = prepare(optimizer, total_steps, window=window, explore=explore, alpha=alpha,
                                      spread=spread, auto=auto, dropout=dropout, callbacks=callbacks, by=_by)
    for name, fn in (("evaluate", evaluate), ("probe", probe)):
        if fn is not None and not callable(fn):
            raise TypeError("%s: %s is not callable" % (_by, name))
    objects, script_step = _resume.check_state(state, _by), _resume.check_start_step(start_step, _by)
    _process.attached[optimizer] = _by
    if not _session.under_hdet():
        _process.start_step = script_step or 0
        return optimizer
    if _process.run is not None:
        raise RuntimeError("%s: hdet runs one optimizer per process, and %s already attached one"
                           % (_by, _process.attached.get(_process.run.optimizer, "attach")))
    if _process.ended:
        raise RuntimeError("%s: hdet runs one optimizer per process, and this process's run under hdet is over"
                           % _by)
    _reseed_replica()
    run = Attachment(optimizer, total, values, settings, evaluate, probe)
    run.resume(objects, script_step)
    _process.start_step = run.step_num
    _process.start(run)
    _hook_exit()
    return optimizer


def start_step() -> int:
    """The optimizer step the script continues from: 0 for a fresh run, the
    step hdet resumed at a relaunch (outside hdet, attach's start_step).
    Loops write `for step in range(hdet.start_step(), total_steps)`."""
    if _process.start_step is None:
        raise RuntimeError("hdet.start_step() is known once hdet.attach(...) has run: call it after the attach line")
    return _process.start_step


def checkpoint_path(path: str) -> str:
    """Where a script that saves and loads its own checkpoints keeps path:
    path itself outside hdet and in the main pass; in the search pass (whose
    replicas train at spread values) a file of the same name in this rank's
    folder of the run directory, so the main pass never starts from it."""
    return _resume.checkpoint_path(path, _session.under_hdet(), _session.rank())


def prepare(optimizer: torch.optim.Optimizer, total_steps: int, *, window: int | None,
            explore: Sequence[Any] | None, alpha: float | None, spread: str | None, auto: dict[str, Any] | None,
            dropout: Any, callbacks: dict[str, Callable[[float], Any]] | None,
            by: str) -> tuple[int, Values, dict[str, Any]]:
    """attach's checks of its arguments against the optimizer: the run's
    length, what it may explore and the settings the HELLO carries."""
    if not isinstance(optimizer, torch.optim.Optimizer):
        raise TypeError("%s: optimizer must be a torch.optim.Optimizer, got %s" % (by, type(optimizer).__name__))
    if not optimizer.param_groups:
        raise ValueError("%s: the optimizer has no param groups" % by)
    total = _args.total_steps(total_steps)
    callbacks = dict(callbacks or {})
    if dropout is not None:
        callbacks["dropout"] = dropout_setter(dropout) if isinstance(dropout, torch.nn.Module) else dropout
    values = Values(optimizer, callbacks)
    if explore is None:
        explore = ["lr"] + (["dropout"] if "dropout" in callbacks else [])
    options = {k: v for k, v in (("alpha", _args.alpha("alpha", alpha)), ("spread", _args.spread("spread", spread)),
                                 ("auto", _args.auto(auto))) if v is not None}
    settings = {"window": _args.window(window, total), "explore": _args.explore(explore, values.names(),
                "auto" in options), "options": options}
    return total, values, settings


def _reseed_replica() -> None:
    """In local sync mode each replica must see its own data: rank r > 0
    offsets torch's, random's and numpy's global seeds by r (rank 0 keeps
    the script's), so shuffling DataLoaders and torch.randint batches
    differ. A script that set up torch.distributed shards its data itself."""
    d = torch.distributed
    r = _session.rank()
    if r == 0 or (d.is_available() and d.is_initialized()):
        return
    seed = torch.initial_seed() + r
    torch.manual_seed(seed)
    random.seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed % 2**32)


def current(optimizer: torch.optim.Optimizer | None = None) -> dict[str, Any] | None:
    """What hdet does now on this rank, None outside hdet (or for an
    optimizer it does not drive): {"step", "total_steps", "window", "pass"
    ("search" or "main"), "values" (this step's planned values; lr's is a
    multiplier), "lr_multiplier", "base_lr" (the first group's rate as the
    script set it), "script_peak_lr" (the highest such rate so far)}."""
    run = _process.run
    if run is None or (optimizer is not None and optimizer is not run.optimizer):
        return None
    return run.status()


def loss_recorder(optimizer: torch.optim.Optimizer | None) -> _loss.LossRecorder | None:
    """The recorder of the attached optimizer's losses; None for another."""
    run = _process.run
    return run.recorder if run is not None and optimizer is not None and optimizer is run.optimizer else None


class Attachment:
    """One attached optimizer under hdet: its step wrapper and windows."""

    def __init__(self, optimizer: torch.optim.Optimizer, total: int, values: Values, settings: dict[str, Any],
                 evaluate: Callable[[], Sequence[float]] | None, probe: Callable[[], float] | None) -> None:
        self.optimizer, self.total, self.values, self.settings = optimizer, total, values, settings
        self.evaluate, self._probe_fn = evaluate, probe
        self.session: _session.Session | None = None
        self.step_num = 0  # optimizer steps completed
        self.stopped = False
        self.window = self.start = self.steps = self.tail = self.pass_ = 0
        self.plan: dict[str, list[float]] = {}
        self.losses: list[torch.Tensor] = []
        self.applied: dict[str, list[float]] = {}
        self.bases: list[float] = []
        self.peak_base = 0.0  # the highest rate the script set itself (group 0), this process
        self.avg: list[torch.Tensor] = []
        self._expected: list[float] | None = None
        self._in_step = False
        self.objects: dict[str, Any] | None = None  # attach's state=
        self.script_step: int | None = None  # attach's start_step=
        self.resumed = False  # loaded hdet's file at attach
        self._start_file: str | None = None  # the file it loaded
        self._planned = False  # a PLAN of this launch came
        # Each scheduler of state=: its last_epoch at the previous two step
        # calls, to see whether the script steps it after every step.
        self._epochs: dict[str, tuple[int | None, int]] = {}
        self.recorder = _loss.LossRecorder(optimizer)
        original = optimizer.step  # bound, or a scheduler's wrapper of it

        def step(opt: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
            return self._step(original, *args, **kwargs)

        if getattr(original, "_wrapped_by_lr_sched", False):
            # A scheduler built before attach (one given in state=) wrapped the
            # step to see it called; without the mark it warns that the step
            # was overridden.
            step._wrapped_by_lr_sched = True  # type: ignore[attr-defined]

        # A bound method: torch's LR schedulers wrap optimizer.step and read
        # its __func__. torch's step post-hook would not run when the step
        # raises, and the group's rate must be put back then too.
        optimizer.step = types.MethodType(step, optimizer)  # type: ignore[method-assign]
        optimizer.register_step_pre_hook(self._check_inside)

    # -- the step ---------------------------------------------------------

    def _step(self, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        for name, sched in self._schedulers().items():
            self._epochs[name] = (self._epochs[name][1] if name in self._epochs else None, sched.last_epoch)
        if self.stopped:
            self._past_end()
        if self.session is None:
            self._connect()
        i = self.step_num - self.start
        now = {name: vals[i] for name, vals in self.plan.items()}
        bases = [as_float(g["lr"]) for g in self.optimizer.param_groups]
        self.peak_base = max(self.peak_base, bases[0])
        saved: Saved = self.values.enter(now)
        self._expected = self.values.expected_lr(now, bases)
        self._in_step = True
        try:
            out = original(*args, **kwargs)
        except BaseException:
            self.recorder.take()  # a retried step records its loss again
            raise
        finally:
            self._in_step = False
            restore(saved)
        if _skipped(self.optimizer):
            self.recorder.take()
            return out
        self._record(i, now, bases[0])
        return out

    def _check_inside(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """Inside the step (torch's pre-hook): the rate the optimizer is
        about to use must be the planned one."""
        if not self._in_step or self._expected is None:
            return
        for k, (g, want) in enumerate(zip(opt.param_groups, self._expected)):
            got = as_float(g["lr"])
            if not math.isclose(got, want, rel_tol=1e-6, abs_tol=0.0):
                self._fail("param group %d's learning rate inside optimizer.step() was %g, not the planned %g "
                           "(the script's %g x this rank's multiplier): something between hdet and the "
                           "optimizer changed it" % (k, got, want, want / max(self.plan_multiplier(), 1e-300)))

    def _record(self, i: int, now: dict[str, float], base: float) -> None:
        loss = self.recorder.take()
        if loss is None:
            self._fail("no loss for step %d: nothing was .backward()-ed since the previous optimizer step"
                       % self.step_num)
        self.losses.append(loss)
        self.bases.append(base)
        for name, v in now.items():
            self.applied[name].append(v)
        self.step_num += 1
        if self.tail and i + 1 > self.steps - self.tail:
            self._accumulate(i + 1 - (self.steps - self.tail) - 1)
        if i + 1 < self.steps:
            self.values.between({name: vals[i + 1] for name, vals in self.plan.items()})
            return
        self._exchange()

    def _past_end(self) -> None:
        if self.step_num >= self.total:
            raise RuntimeError("hdet: optimizer step %d is past total_steps=%d given to %s; give it the number of "
                               "optimizer steps the script takes" % (self.step_num + 1, self.total,
                                                                      _process.attached.get(self.optimizer)))
        raise _session.Stopped(self.step_num)

    # -- resuming at the step (docs/pytorch.md#resume) --------------------

    @property
    def resumable(self) -> bool:
        """The script gave hdet its state, or restores itself and says its step."""
        return self.objects is not None or self.script_step is not None

    def resume(self, objects: dict[str, Any] | None, script_step: int | None) -> None:
        """At attach: when hdet launched this worker to resume, load the
        file it named into the optimizer, its parameters, every state
        object and the client, so the script continues at that step. A
        script that gives hdet nothing is not resumed (hdet says so and
        starts the run over)."""
        self.objects, self.script_step = objects, script_step
        req = _resume.request()
        if req is None or not self.resumable:
            return
        path, step = req
        if script_step is not None and script_step != step:
            raise RuntimeError("hdet: the script resumed its own checkpoint at step %d (attach(..., start_step=%d)), "
                               "but hdet resumes this run at step %d, the last window end it saved: load the "
                               "checkpoint of step %d, or give hdet the script's state (attach(..., state={...})) "
                               "and let it restore it; %s" % (script_step, script_step, step, step, _resume.DOCS))
        saved = _resume.read(path, step)
        if saved.get("fresh"):  # saved before its launch's first step: that launch started fresh
            return
        self._load_saved(saved, path)
        self.step_num = self.start = step
        self.resumed, self._start_file = True, path

    @torch.no_grad()
    def _load_saved(self, saved: dict[str, Any], path: str) -> None:
        self.optimizer.load_state_dict(saved["optimizer"])
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        shapes = [tuple(_session.local(p).shape) for p in params]
        if [tuple(t.shape) for t in saved["params"]] != shapes:
            raise RuntimeError("hdet: %s holds parameters of other shapes than the attached optimizer's %s"
                               % (path, shapes))
        for p, t in zip(params, saved["params"]):
            _session.local(p).copy_(t)
        if self.objects is not None:
            self._load_objects(saved)
        self.peak_base, self.pass_ = saved["client"]["peak_base"], saved["client"]["pass"]
        _resume.set_rng_state(saved["rng"])  # last: loading the objects may draw from them

    def _load_objects(self, saved: dict[str, Any]) -> None:
        objects = self.objects or {}
        if sorted(saved["state"]) != sorted(objects):
            raise RuntimeError("hdet: the state hdet saved at step %d holds %s, but attach's state= gives %s: give "
                               "the relaunch the same names" % (saved["step"], sorted(saved["state"]), sorted(objects)))
        for name, obj in objects.items():
            obj.load_state_dict(saved["state"][name])
        # hdet saved inside the window's last optimizer.step(): the script's
        # scheduler.step() after it had not run yet (and does not, in a
        # launch that stopped there). Run it for a scheduler the script
        # steps after every optimizer step, as the script would have.
        for name in saved["step_after"]:
            objects[name].step()
        for name, sched in self._schedulers().items():  # as if seen at the saved launch's steps
            self._epochs[name] = (None, sched.last_epoch - (name in saved["step_after"]))

    def _save(self, msg: dict[str, Any]) -> None:
        """hdet's SAVE at a window end (the session has loaded the
        converged parameters): write everything a relaunch needs to path."""
        path, step = msg.get("path"), msg.get("step")
        if not isinstance(path, str) or not path:
            self._fail("save without a path: %r" % (msg,))
        if step != self.step_num:
            self._fail("hdet asked to save the state of step %r, but the script is at step %d" % (step, self.step_num))
        if not self._planned:
            # Before this launch's first PLAN, inside its first step: the
            # script has drawn that step's batch already. Its state at the
            # step's start is what attach loaded, or a fresh start.
            _resume.write(path, self._start_file)
            return
        objects = self.objects or {}
        _resume.write(path, {
            "format": _resume.FORMAT, "step": step, "pass": msg.get("pass", _resume.pass_name()),
            "optimizer": self.optimizer.state_dict(),
            "params": [_session.local(p).detach() for g in self.optimizer.param_groups for p in g["params"]],
            "state": {name: obj.state_dict() for name, obj in objects.items()},
            "step_after": [name for name, (prev, now) in self._epochs.items() if prev is None or now == prev + 1],
            "client": {"peak_base": self.peak_base, "pass": self.pass_},
            "rng": _resume.rng_state(),
        })

    def _schedulers(self) -> dict[str, lr_scheduler.LRScheduler]:
        return {n: o for n, o in (self.objects or {}).items() if isinstance(o, lr_scheduler.LRScheduler)}

    def _check_own_checkpoint(self) -> None:
        """At the first step: a script that resumed a checkpoint hdet did
        not resume (its optimizer has taken steps already, or it said so
        with start_step=) would train on from another launch's state: in
        the main pass's first launch one of the search pass, whose replicas
        trained at spread values. start_step=0 says the script means it (a
        start from another run's optimizer state)."""
        if self.resumed:
            return
        own = self.script_step if self.script_step is not None else _optimizer_steps(self.optimizer)
        if own == 0:
            return
        if _resume.pass_name() == "main" and _resume.request() is None:
            self._fail("the main pass starts at step 0, but the script resumed a checkpoint at step %d that hdet did "
                       "not resume: one the script wrote in the search pass, whose replicas trained at spread values, "
                       "one of an earlier launch that hdet started over, or another run's left at that path (a "
                       "plain run in the same folder: move it away). Keep the passes apart with one line: "
                       "torch.save(..., hdet.checkpoint_path(\"ckpt.pt\")), and the same path for torch.load; to "
                       "resume at the step, give hdet the script's state (attach(..., state={...})); %s"
                       % (own, _resume.DOCS))
        self._fail("hdet starts this run at step %d of the %s pass, but the script resumed its own checkpoint at "
                   "step %d: give hdet the script's state (attach(..., state={...})) so a relaunch resumes both at "
                   "hdet's step, and keep the search pass's files apart (hdet.checkpoint_path); a deliberate start "
                   "from another run's optimizer state says attach(..., start_step=0); %s"
                   % (self.step_num, _resume.pass_name(), own, _resume.DOCS))

    # -- windows ----------------------------------------------------------

    def _connect(self) -> None:
        groups = self.optimizer.param_groups
        probe = self._probe_fn if self._probe_fn is not None else _process.probe
        self._probe_fn = probe
        hello: dict[str, Any] = {
            "hyperparameters": self.values.names(),
            "param_groups": [
                {"key": k, "size": sum(_session.local(p).numel() for p in g["params"]), "lr": as_float(g["lr"]),
                 "weight_decay": as_float(g.get("weight_decay", 0.0))}
                for k, g in zip(group_keys(groups), groups)],
            "device": str(groups[0]["params"][0].device),
            "total_steps": self.total,
            "optimizer": type(self.optimizer).__name__,
            "explore": self.settings["explore"],
            "options": self.settings["options"],
            "evaluate": self.evaluate is not None,
            "probe": probe is not None,
            "resumable": self.resumable,
            "start_step": self.step_num,
            # The peak of the pass so far when resumed (0 fresh): hdet commits the pass's peak.
            "script_peak_lr": self.peak_base,
        }
        if self.settings["window"] is not None:
            hello["hdet_window"] = self.settings["window"]
        self.session = _session.Session(self.optimizer, hello)
        self.session.on_save = self._save if self.resumable else None
        self._check_own_checkpoint()
        self._next_window()

    def _exchange(self) -> None:
        s = self.session
        assert s is not None
        t0, window = time.perf_counter(), self.window
        s.hand_over()
        probe = self._probe() if self.tail else None
        losses = torch.stack([x.cpu() for x in self.losses]).double().tolist()
        s.done(self.window, self.steps, losses, self.applied, self.bases, probe)
        t1 = time.perf_counter()
        self._next_window()
        # The exchange's cost (for `make bench-pytorch`'s profile): handing
        # over and reporting, then waiting for the plan and loading it.
        s.trace(event="exchange", window=window, send_s=t1 - t0, wait_s=time.perf_counter() - t1)

    def _next_window(self) -> None:
        s = self.session
        assert s is not None
        msg = s.next_message(self.evaluate)
        if msg is None:
            self._end()
            if self.step_num < self.total:
                raise _session.Stopped(self.step_num)
            return
        start, steps = msg.get("start", 0), msg.get("steps", 0)
        if start != self.step_num:
            self._fail("the plan starts at step %d but the script is at step %d" % (start, self.step_num))
        plan = msg.get("values") or {}
        names = self.values.names()
        for name, vals in plan.items():
            if name not in names or len(vals) != steps:
                self._fail("bad plan for %r (%d values for %d steps)" % (name, len(vals), steps))
            if not all(math.isfinite(v) for v in vals):
                self._fail("non-finite value planned for %r" % name)
        self.window, self.start, self.steps, self.plan = msg.get("window", 0), start, steps, plan
        self._planned = True
        self.pass_ = msg.get("pass", 0)
        self.tail = msg.get("probe_tail", 0) if self._probe_fn is not None else 0
        if self.tail and not self.avg:
            self.avg = [torch.empty_like(p) for p in s.params]
        self.losses, self.bases = [], []
        self.applied = {name: [] for name in plan}
        self.values.between({name: vals[0] for name, vals in plan.items()})

    def _end(self) -> None:
        """hdet's STOP: the run is over. Let go of what only hdet needed
        (the shared buffer, the probe's copy of the parameters, the
        window's losses) and of the attachment, so nothing of hdet keeps the
        script's model, optimizer or memory alive after it."""
        self.stopped = True
        self.recorder.close()
        self.session, self.avg, self.losses = None, [], []
        _process.end()

    @torch.no_grad()
    def _accumulate(self, k: int) -> None:
        """Running mean of the parameters over the window's tail."""
        assert self.session is not None
        for p, a in zip(self.session.params, self.avg):
            if k == 0:
                a.copy_(p)
            else:
                a.add_(p - a, alpha=1.0 / (k + 1))

    @torch.no_grad()
    def _probe(self) -> float:
        """The probe loss of the tail average; the last iterate is restored."""
        assert self.session is not None and self._probe_fn is not None
        params = self.session.params
        saved = [p.detach().clone() for p in params]
        for p, a in zip(params, self.avg):
            p.copy_(a)
        try:
            return float(self._probe_fn())
        finally:
            for p, s in zip(params, saved):
                p.copy_(s)

    def _fail(self, why: str) -> NoReturn:
        if self.session is not None:
            self.session.fail(why)
        raise RuntimeError("hdet: " + why)

    def plan_multiplier(self) -> float:
        i = min(max(self.step_num - self.start, 0), max(self.steps - 1, 0))
        vals = self.plan.get("lr")
        return vals[i] if vals else 1.0

    def status(self) -> dict[str, Any]:
        i = min(max(self.step_num - self.start, 0), max(self.steps - 1, 0))
        return {"step": self.step_num, "total_steps": self.total, "window": self.window,
                "pass": "main" if self.pass_ else "search",
                "values": {name: vals[i] for name, vals in self.plan.items() if vals},
                "lr_multiplier": self.plan_multiplier(), "base_lr": as_float(self.optimizer.param_groups[0]["lr"]),
                "script_peak_lr": self.peak_base}

    def report(self, message: str) -> None:
        if self.session is not None:
            self.session.report(message)


def _optimizer_steps(optimizer: torch.optim.Optimizer) -> int:
    """The steps the optimizer's state counts (Adam's "step"; 0 without)."""
    steps = [as_float(st["step"]) for st in optimizer.state.values() if isinstance(st, dict) and "step" in st]
    return int(max(steps)) if steps else 0


def _skipped(optimizer: torch.optim.Optimizer) -> bool:
    """A fused optimizer's step that AMP's GradScaler told to skip: the
    scaler sets found_inf on the optimizer for the step's duration and the
    kernel skips the update (an unfused step is not called at all)."""
    found = getattr(optimizer, "found_inf", None)
    return torch.is_tensor(found) and bool(found.item() != 0)


def _excepthook(kind: Any, value: Any, tb: Any) -> None:
    run = _process.run
    if run is not None and not issubclass(kind, SystemExit):
        line = "".join(traceback.format_exception_only(kind, value)).strip()
        run.report("the script raised at step %d of %d: %s" % (run.step_num, run.total, line))
    _previous_excepthook(kind, value, tb)


_previous_excepthook = sys.excepthook


def _atexit() -> None:
    run = _process.run
    if run is not None and run.session is not None and not run.session.finished:
        run.report("the script ended after %d of the %d optimizer steps it gave hdet (total_steps) before the "
                   "run finished" % (run.step_num, run.total))


def _hook_exit() -> None:
    """Tell hdet why the script stops early: its exception, or an early end."""
    global _previous_excepthook
    if _process.hooked:
        return
    _process.hooked = True
    _previous_excepthook = sys.excepthook
    sys.excepthook = _excepthook
    atexit.register(_atexit)
