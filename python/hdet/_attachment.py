"""One attached optimizer's step under hdet.

attach wraps this optimizer's step (this instance only): whatever rate the
script (its scheduler, or its own loop) has put in each param group when
step() is called is the base; the step runs at base x this rank's planned
multiplier, and the group's own value is put back right after it, also when
the step raises. The step that completes a window hands the parameters to
hdet (Windows), which averages them across ranks and loads the average back
before the step returns.
"""

from __future__ import annotations

import math
import types
from collections.abc import Sequence
from typing import Any, Callable, NoReturn

import torch

from . import _loss, _session
from ._buffer_layout import local
from ._replica_data import ReplicaData, one_pass
from ._saved_state import SavedState
from ._tail import TailAverage
from ._values import Saved, Values, as_float, group_keys, restore
from ._windows import Windows


class Attachment:
    """One attached optimizer under hdet: its step wrapper, and the parts
    the steps drive (the windows, the saved state, the loss recorder)."""

    def __init__(self, optimizer: torch.optim.Optimizer, total: int, values: Values, settings: dict[str, Any],
                 evaluate: Callable[[], Sequence[float]] | None, probe: Callable[[], float] | None, *,
                 by: str = "hdet.attach", registered_probe: Callable[[], Callable[[], float] | None] = lambda: None,
                 on_end: Callable[[], None] = lambda: None) -> None:
        self.optimizer, self.total, self.values, self.settings, self.by = optimizer, total, values, settings, by
        self._registered_probe, self._on_end = registered_probe, on_end
        self.step_num = 0  # optimizer steps completed
        self.stopped = False
        self.peak_base = 0.0  # the highest rate the script set itself (group 0), this process
        self._expected: list[float] | None = None  # each group's rate inside the current step
        self.windows = Windows(values, evaluate, TailAverage(probe))
        self.saved = SavedState(optimizer, None, None, self.windows.fail)
        self.recorder = _loss.LossRecorder(optimizer)
        # The main pass (a run of one pass, and a run with a probe, whose
        # search hdet never runs on shared batches) reseeds this replica
        # here, before resume's RNG states.
        self.data = ReplicaData(one_pass(settings.get("options") or {}) or probe is not None
                                or registered_probe() is not None)
        _wrap_step(optimizer, self._step)
        optimizer.register_step_pre_hook(self._check_inside)

    # -- the step ---------------------------------------------------------

    def _step(self, original: Callable[..., Any], *args: Any, **kwargs: Any) -> Any:
        self.saved.observe_schedulers()
        if self.stopped:
            self._past_end()
        if self.windows.session is None:
            self._connect()
        i = self.step_num - self.windows.start
        now = self.windows.values_at(i)
        bases = [as_float(g["lr"]) for g in self.optimizer.param_groups]
        self.peak_base = max(self.peak_base, bases[0])
        saved: Saved = self.values.enter(now)
        self._expected = self.values.expected_lr(now, bases)
        try:
            out = original(*args, **kwargs)
        except BaseException:
            self.recorder.take()  # a retried step records its loss again
            raise
        finally:
            self._expected = None
            restore(saved)
        if _skipped(self.optimizer):
            self.recorder.take()
            return out
        self._record(i, now, bases[0])
        return out

    def _check_inside(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """Inside the step (torch's pre-hook): the rate the optimizer is
        about to use must be the planned one."""
        if self._expected is None:
            return
        for k, (g, want) in enumerate(zip(opt.param_groups, self._expected)):
            got = as_float(g["lr"])
            if not math.isclose(got, want, rel_tol=1e-6, abs_tol=0.0):
                self.fail("param group %d's learning rate inside optimizer.step() was %g, not the planned %g "
                          "(the script's %g x this rank's multiplier): something between hdet and the "
                          "optimizer changed it" % (k, got, want, want / max(self.plan_multiplier(), 1e-300)))

    def _record(self, i: int, now: dict[str, float], base: float) -> None:
        loss = self.recorder.take()
        if loss is None:
            self.fail("no loss for step %d: nothing was .backward()-ed since the previous optimizer step"
                      % self.step_num)
        self.step_num += 1
        if not self.windows.record(i, loss, now, base):
            return
        if not self.windows.exchange(self.step_num):
            self._stop()
        else:
            self.data.plan(self.windows.search)

    def _past_end(self) -> None:
        if self.step_num >= self.total:
            raise RuntimeError("hdet: optimizer step %d is past total_steps=%d given to %s; give it the number of "
                               "optimizer steps the script takes" % (self.step_num + 1, self.total, self.by))
        raise _session.Stopped(self.step_num)

    # -- the run's start and end ------------------------------------------

    def resume(self, objects: dict[str, Any] | None, script_step: int | None) -> None:
        """At attach: what the script gave to resume with; when hdet
        launched this worker to resume, the run continues at the saved step."""
        self.saved.objects, self.saved.script_step = objects, script_step
        loaded = self.saved.load()
        if loaded is None:
            return
        step, client = loaded
        self.peak_base, self.windows.pass_ = client["peak_base"], client["pass"]
        # A state saved before the search pass shared batches: its own.
        self.data.set_own(client.get("own_data", True))
        self.step_num = self.windows.start = step

    def _save(self, msg: dict[str, Any]) -> None:
        self.saved.save(msg, self.step_num, self.windows.planned,
                        {"peak_base": self.peak_base, "pass": self.windows.pass_, "own_data": self.data.own})

    def _connect(self) -> None:
        tail = self.windows.tail
        if tail.probe is None:
            tail.probe = self._registered_probe()
        session = self.windows.connect(self.optimizer, self._hello())
        session.on_save = self._save if self.saved.resumable else None
        self.saved.check_own_checkpoint(self.step_num)
        if not self.windows.next(self.step_num):
            self._stop()
        self.data.plan(self.windows.search)

    def _hello(self) -> dict[str, Any]:
        groups = self.optimizer.param_groups
        hello: dict[str, Any] = {
            "hyperparameters": self.values.names(),
            "param_groups": [
                {"key": k, "size": sum(local(p).numel() for p in g["params"]), "lr": as_float(g["lr"]),
                 "weight_decay": as_float(g.get("weight_decay", 0.0))}
                for k, g in zip(group_keys(groups), groups)],
            "device": str(groups[0]["params"][0].device),
            "total_steps": self.total,
            "optimizer": type(self.optimizer).__name__,
            "explore": self.settings["explore"],
            "options": self.settings["options"],
            "evaluate": self.windows.evaluate is not None,
            "probe": self.windows.tail.probe is not None,
            "resumable": self.saved.resumable,
            "start_step": self.step_num,
            # The peak of the pass so far when resumed (0 fresh): hdet commits the pass's peak.
            "script_peak_lr": self.peak_base,
        }
        if self.settings["window"] is not None:
            hello["hdet_window"] = self.settings["window"]
        return hello

    def _stop(self) -> None:
        """hdet's STOP: the run is over. Let go of what only hdet needed and
        of the attachment, so nothing of hdet keeps the script's model,
        optimizer or memory alive after it; before the script's last step,
        the script stops (Stopped)."""
        self.stopped = True
        self.recorder.close()
        self.windows.end()
        self._on_end()
        if self.step_num < self.total:
            raise _session.Stopped(self.step_num)

    # -- what the script and hdet read --------------------------------------

    def fail(self, why: str) -> NoReturn:
        self.windows.fail(why)

    def finished(self) -> bool:
        """Nothing left to tell hdet at exit: not connected, or the session is over."""
        s = self.windows.session
        return s is None or s.finished

    def report(self, message: str) -> None:
        self.windows.report(message)

    def plan_multiplier(self) -> float:
        vals = self.windows.plan.get("lr")
        return vals[self.windows.index(self.step_num)] if vals else 1.0

    def status(self) -> dict[str, Any]:
        w = self.windows
        i = w.index(self.step_num)
        return {"step": self.step_num, "total_steps": self.total, "window": w.window,
                "pass": "main" if w.pass_ else "search",
                "values": {name: vals[i] for name, vals in w.plan.items() if vals},
                "lr_multiplier": self.plan_multiplier(), "base_lr": as_float(self.optimizer.param_groups[0]["lr"]),
                "script_peak_lr": self.peak_base}


def _wrap_step(optimizer: torch.optim.Optimizer, step: Callable[..., Any]) -> None:
    """optimizer.step (this instance's) becomes step(original, ...)."""
    original = optimizer.step  # bound, or a scheduler's wrapper of it

    def wrapper(opt: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
        return step(original, *args, **kwargs)

    if getattr(original, "_wrapped_by_lr_sched", False):
        # A scheduler built before attach (one given in state=) wrapped the
        # step to see it called; without the mark (private to torch's
        # lr_scheduler, 2.15) it warns that the step was overridden.
        wrapper._wrapped_by_lr_sched = True  # type: ignore[attr-defined]
    # A bound method: torch's LR schedulers wrap optimizer.step and read
    # its __func__ (test_step_wrapper.py fails if either part changes).
    # torch's step post-hook would not run when the step raises, and the
    # group's rate must be put back then too.
    optimizer.step = types.MethodType(wrapper, optimizer)  # type: ignore[method-assign]


def _skipped(optimizer: torch.optim.Optimizer) -> bool:
    """A fused optimizer's step that AMP's GradScaler told to skip: the
    scaler sets found_inf on the optimizer for the step's duration and the
    kernel skips the update (an unfused step is not called at all).
    found_inf is GradScaler's private hand-over to optimizers with
    _step_supports_amp_scaling (torch 2.15); test_loss.py fails if it
    changes."""
    found = getattr(optimizer, "found_inf", None)
    return torch.is_tensor(found) and bool(found.item() != 0)
