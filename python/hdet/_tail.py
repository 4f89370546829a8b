"""The probe signal's average: the parameters' running mean over the last
steps of a window (hdet names how many, probe_tail), and the probe loss of
that mean (docs/design.md §1.1)."""

from __future__ import annotations

from typing import Callable

import torch


class TailAverage:
    """The running mean of the parameters over a window's tail, and the
    probe function that evaluates it."""

    def __init__(self, probe: Callable[[], float] | None) -> None:
        self.probe = probe  # attach's probe=, or the one registered before the first step
        self.steps = 0  # the tail's steps in this window; 0: no probe this window
        self._avg: list[torch.Tensor] = []

    def start_window(self, tail: int, params: list[torch.Tensor]) -> None:
        self.steps = tail if self.probe is not None else 0
        if self.steps and not self._avg:
            self._avg = [torch.empty_like(p) for p in params]

    @torch.no_grad()
    def after_step(self, i: int, window_steps: int, params: list[torch.Tensor]) -> None:
        """Step i of the window (0-based) is done: add it when in the tail."""
        k = i - (window_steps - self.steps)  # its place in the tail
        if not self.steps or k < 0:
            return
        for p, a in zip(params, self._avg):
            if k == 0:
                a.copy_(p)
            else:
                a.add_(p - a, alpha=1.0 / (k + 1))

    @torch.no_grad()
    def loss(self, params: list[torch.Tensor]) -> float | None:
        """The probe loss of the tail's mean (None without a tail); the last
        iterate is put back."""
        if not self.steps or self.probe is None:
            return None
        saved = [p.detach().clone() for p in params]
        for p, a in zip(params, self._avg):
            p.copy_(a)
        try:
            return float(self.probe())
        finally:
            for p, s in zip(params, saved):
                p.copy_(s)

    def release(self) -> None:
        """The run is over: the copy of the parameters goes."""
        self._avg = []
