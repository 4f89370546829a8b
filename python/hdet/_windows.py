"""This rank's side of hdet's windows: the connection opened at the first
step, each window's plan (PLAN), its report (DONE, after the parameters are
handed over) and hdet's STOP. The protocol's messages are _session's; this
is what the attached optimizer's steps make of them."""

from __future__ import annotations

import math
import time
from collections.abc import Sequence
from typing import Any, Callable, NoReturn

import torch

from . import _session
from ._tail import TailAverage
from ._values import Values


class Windows:
    """The current window's plan and what its steps recorded."""

    def __init__(self, values: Values, evaluate: Callable[[], Sequence[float]] | None, tail: TailAverage) -> None:
        self.values, self.evaluate, self.tail = values, evaluate, tail
        self.session: _session.Session | None = None
        self.window = self.start = self.steps = 0
        self.pass_ = 0  # 0 the search pass, 1 the main pass
        self.plan: dict[str, list[float]] = {}
        self.planned = False  # a PLAN of this launch came
        self.search = False  # the PLAN says: a search pass that hdet restarts (the replicas share batches)
        self.losses: list[torch.Tensor] = []
        self.applied: dict[str, list[float]] = {}
        self.bases: list[float] = []

    def connect(self, optimizer: torch.optim.Optimizer, hello: dict[str, Any]) -> _session.Session:
        self.session = _session.Session(optimizer, hello)
        return self.session

    def index(self, step: int) -> int:
        """step's place in the window, clamped to it (for status)."""
        return min(max(step - self.start, 0), max(self.steps - 1, 0))

    def values_at(self, i: int) -> dict[str, float]:
        return {name: vals[i] for name, vals in self.plan.items()}

    def record(self, i: int, loss: torch.Tensor, now: dict[str, float], base: float) -> bool:
        """Step i of the window is done; True when it was the window's last."""
        assert self.session is not None
        self.losses.append(loss)
        self.bases.append(base)
        for name, v in now.items():
            self.applied[name].append(v)
        self.tail.after_step(i, self.steps, self.session.params)
        if i + 1 < self.steps:
            self.values.between(self.values_at(i + 1))
            return False
        return True

    def exchange(self, step: int) -> bool:
        """The window is trained: hand it over, report it and take the next
        plan. False when hdet stopped the run instead."""
        s = self.session
        assert s is not None
        t0, window = time.perf_counter(), self.window
        s.hand_over()
        probe = self.tail.loss(s.params)
        losses = torch.stack([x.cpu() for x in self.losses]).double().tolist()
        s.done(self.window, self.steps, losses, self.applied, self.bases, probe)
        t1 = time.perf_counter()
        more = self.next(step)
        # The exchange's cost (for `make bench-pytorch`'s profile): handing
        # over and reporting, then waiting for the plan and loading it.
        s.trace(event="exchange", window=window, send_s=t1 - t0, wait_s=time.perf_counter() - t1)
        return more

    def next(self, step: int) -> bool:
        """Take the next PLAN (serving hdet's evaluations and saves before
        it); False at hdet's STOP."""
        assert self.session is not None
        msg = self.session.next_message(self.evaluate)
        if msg is None:
            return False
        start, steps = msg.get("start", 0), msg.get("steps", 0)
        if start != step:
            self.fail("the plan starts at step %d but the script is at step %d" % (start, step))
        plan = msg.get("values") or {}
        names = self.values.names()
        for name, vals in plan.items():
            if name not in names or len(vals) != steps:
                self.fail("bad plan for %r (%d values for %d steps)" % (name, len(vals), steps))
            if not all(math.isfinite(v) for v in vals):
                self.fail("non-finite value planned for %r" % name)
        self.window, self.start, self.steps, self.plan = msg.get("window", 0), start, steps, plan
        self.planned = True
        self.pass_ = msg.get("pass", 0)
        self.search = bool(msg.get("search", False))
        self.tail.start_window(msg.get("probe_tail", 0), self.session.params)
        self.losses, self.bases = [], []
        self.applied = {name: [] for name in plan}
        self.values.between(self.values_at(0))
        return True

    def end(self) -> None:
        """Let go of what only hdet needed: the session (its shared buffer),
        the probe's copy of the parameters, the window's losses."""
        self.session, self.losses = None, []
        self.tail.release()

    def fail(self, why: str) -> NoReturn:
        """Tell hdet why (once connected), then raise."""
        if self.session is not None:
            self.session.fail(why)
        raise RuntimeError("hdet: " + why)

    def report(self, message: str) -> None:
        if self.session is not None:
            self.session.report(message)
