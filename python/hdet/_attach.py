"""hdet.attach: one line that runs any PyTorch training loop under hdet.

The public entry points (attach, start_step, checkpoint_path, current, the
probe's registration) and the client's one process-wide object, Process.
Under `hdet run --worker`, attach hands the optimizer to an Attachment
(_attachment.py), which wraps its step; outside hdet attach checks its
arguments and installs nothing.

What runs under hdet, by job: _attachment.Attachment (the step wrapper),
_windows.Windows (the window protocol: plan, hand-over, report, STOP),
_tail.TailAverage (the probe's average), _saved_state.SavedState (resume
and save), _loss.LossRecorder (each step's loss), _exit_report.ExitReport
(why a script stopped early), _session.Session (the connection and shared
buffer), _buffer_layout (what of the tensors the buffer holds).
"""

from __future__ import annotations

import weakref
from collections.abc import Sequence
from typing import Any, Callable

import torch

from . import _args, _loss, _resume, _session
from ._attachment import Attachment
from ._exit_report import ExitReport
from ._values import Values, dropout_setter

__all__ = ["Attachment", "Process", "Values", "attach", "checkpoint_path", "current", "loss_recorder", "prepare",
           "register_probe", "start_step"]


class Process:
    """The client's one process-wide object: the probe registered before
    attach, which optimizers are attached (by whom), the one attachment that
    talks to hdet (one connection per process) and, while it is on, its
    ExitReport."""

    def __init__(self) -> None:
        self.probe: Callable[[], float] | None = None
        self.attached: weakref.WeakKeyDictionary[torch.optim.Optimizer, str] = weakref.WeakKeyDictionary()
        self._run: Attachment | None = None
        self._ended: weakref.ref[Attachment] | None = None
        self.start_step: int | None = None  # set by attach: hdet.start_step()
        self.emptied: set[str] = set()  # search folders hdet.checkpoint_path started afresh
        self.hidden_env: dict[str, str] = {}  # launcher variables the integrations took out of os.environ
        # The exit report was installed for this process's run; a test's
        # stand-in process sets it beforehand to install none.
        self.hooked = False
        self._exit_report: ExitReport | None = None

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
        if not self.hooked:
            self.hooked = True
            self._exit_report = ExitReport(run)
            self._exit_report.install()

    def end(self) -> None:
        if self._exit_report is not None:
            self._exit_report.remove()
            self._exit_report = None
        if self._run is not None:
            self._ended = weakref.ref(self._run)
            self._run = None

    @property
    def ended(self) -> bool:
        return self._ended is not None


# The client's only process-wide state (the tests give each case a new one).
_process = Process()
_Process = Process  # the name the integrations' tests use


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
    registered_probe = _start_run(_process, _by)
    run = Attachment(optimizer, total, values, settings, evaluate, probe, by=_by, registered_probe=registered_probe,
                     on_end=_process.end)
    run.resume(objects, script_step)
    _process.start_step = run.step_num
    _process.start(run)
    return optimizer


def _start_run(process: Process, by: str) -> Callable[[], Callable[[], float] | None]:
    """Before the process's one run under hdet starts: refuse a second;
    returns how the run finds the probe registered before its first step.
    (The Attachment then gives this replica its data: _replica_data.)"""
    if process.run is not None:
        raise RuntimeError("%s: hdet runs one optimizer per process, and %s already attached one"
                           % (by, process.attached.get(process.run.optimizer, "attach")))
    if process.ended:
        raise RuntimeError("%s: hdet runs one optimizer per process, and this process's run under hdet is over"
                           % by)
    return lambda: process.probe


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
    return _resume.checkpoint_path(path, _session.under_hdet(), _session.rank(), _process.emptied)


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
