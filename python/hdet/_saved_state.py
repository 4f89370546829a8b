"""An attached run's state files (docs/pytorch.md#resume): loading the file
hdet names at a relaunch, writing one at each of hdet's SAVEs, and the check
that a script which restores itself starts where hdet does. The file's
format and the generators' state are _resume's."""

from __future__ import annotations

from typing import Any, Callable, NoReturn

import torch
from torch.optim import lr_scheduler

from . import _resume
from ._buffer_layout import local
from ._values import as_float


class SavedState:
    """What attach was given to resume with (state=, start_step=), and what
    hdet's files hold of it."""

    def __init__(self, optimizer: torch.optim.Optimizer, objects: dict[str, Any] | None, script_step: int | None,
                 fail: Callable[[str], NoReturn]) -> None:
        self.optimizer, self.fail = optimizer, fail
        self.objects = objects  # attach's state=
        self.script_step = script_step  # attach's start_step=
        self.resumed = False  # loaded hdet's file at attach
        self.start_file: str | None = None  # the file it loaded
        # Each scheduler of state=: its last_epoch at the previous two step
        # calls, to see whether the script steps it after every step.
        self._epochs: dict[str, tuple[int | None, int]] = {}

    @property
    def resumable(self) -> bool:
        """The script gave hdet its state, or restores itself and says its step."""
        return self.objects is not None or self.script_step is not None

    def observe_schedulers(self) -> None:
        """At each optimizer step call."""
        for name, sched in self._schedulers().items():
            self._epochs[name] = (self._epochs[name][1] if name in self._epochs else None, sched.last_epoch)

    def load(self) -> tuple[int, dict[str, Any]] | None:
        """At attach: when hdet launched this worker to resume, load the
        file it named into the optimizer, its parameters and every state
        object; returns the step and the client's own saved state. A script
        that gives hdet nothing is not resumed (hdet says so and starts the
        run over)."""
        req = _resume.request()
        if req is None or not self.resumable:
            return None
        path, step = req
        if self.script_step is not None and self.script_step != step:
            raise RuntimeError("hdet: the script resumed its own checkpoint at step %d (attach(..., start_step=%d)), "
                               "but hdet resumes this run at step %d, the last window end it saved: load the "
                               "checkpoint of step %d, or give hdet the script's state (attach(..., state={...})) "
                               "and let it restore it; %s"
                               % (self.script_step, self.script_step, step, step, _resume.DOCS))
        saved = _resume.read(path, step)
        if saved.get("fresh"):  # saved before its launch's first step: that launch started fresh
            return None
        self._load_tensors(saved, path)
        if self.objects is not None:
            self._load_objects(saved)
        _resume.set_rng_state(saved["rng"])  # last: loading the objects may draw from them
        self.resumed, self.start_file = True, path
        return step, saved["client"]

    @torch.no_grad()
    def _load_tensors(self, saved: dict[str, Any], path: str) -> None:
        self.optimizer.load_state_dict(saved["optimizer"])
        params = [p for g in self.optimizer.param_groups for p in g["params"]]
        shapes = [tuple(local(p).shape) for p in params]
        if [tuple(t.shape) for t in saved["params"]] != shapes:
            raise RuntimeError("hdet: %s holds parameters of other shapes than the attached optimizer's %s"
                               % (path, shapes))
        for p, t in zip(params, saved["params"]):
            local(p).copy_(t)

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

    def save(self, msg: dict[str, Any], step_num: int, planned: bool, client: dict[str, Any]) -> None:
        """hdet's SAVE at a window end (the session has loaded the converged
        parameters): write everything a relaunch needs to the path it names.
        planned: a PLAN of this launch came; client: the client's own state."""
        path, step = msg.get("path"), msg.get("step")
        if not isinstance(path, str) or not path:
            self.fail("save without a path: %r" % (msg,))
        if step != step_num:
            self.fail("hdet asked to save the state of step %r, but the script is at step %d" % (step, step_num))
        if not planned:
            # Before this launch's first PLAN, inside its first step: the
            # script has drawn that step's batch already. Its state at the
            # step's start is what attach loaded, or a fresh start.
            _resume.write(path, self.start_file)
            return
        objects = self.objects or {}
        _resume.write(path, {
            "format": _resume.FORMAT, "step": step, "pass": msg.get("pass", _resume.pass_name()),
            "optimizer": self.optimizer.state_dict(),
            "params": [local(p).detach() for g in self.optimizer.param_groups for p in g["params"]],
            "state": {name: obj.state_dict() for name, obj in objects.items()},
            "step_after": [name for name, (prev, now) in self._epochs.items() if prev is None or now == prev + 1],
            "client": client,
            "rng": _resume.rng_state(),
        })

    def _schedulers(self) -> dict[str, lr_scheduler.LRScheduler]:
        return {n: o for n, o in (self.objects or {}).items() if isinstance(o, lr_scheduler.LRScheduler)}

    def check_own_checkpoint(self, step_num: int) -> None:
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
            self.fail("the main pass starts at step 0, but the script resumed a checkpoint at step %d that hdet did "
                      "not resume: one the script wrote in the search pass, whose replicas trained at spread values, "
                      "one of an earlier launch that hdet started over, or another run's left at that path (a "
                      "plain run in the same folder: move it away). Keep the passes apart with one line: "
                      "torch.save(..., hdet.checkpoint_path(\"ckpt.pt\")), and the same path for torch.load; to "
                      "resume at the step, give hdet the script's state (attach(..., state={...})); %s"
                      % (own, _resume.DOCS))
        self.fail("hdet starts this run at step %d of the %s pass, but the script resumed its own checkpoint at "
                  "step %d: give hdet the script's state (attach(..., state={...})) so a relaunch resumes both at "
                  "hdet's step, and keep the search pass's files apart (hdet.checkpoint_path); a deliberate start "
                  "from another run's optimizer state says attach(..., start_step=0); %s"
                  % (step_num, _resume.pass_name(), own, _resume.DOCS))


def _optimizer_steps(optimizer: torch.optim.Optimizer) -> int:
    """The steps the optimizer's state counts (Adam's "step"; 0 without)."""
    steps = [as_float(st["step"]) for st in optimizer.state.values() if isinstance(st, dict) and "step" in st]
    return int(max(steps)) if steps else 0
