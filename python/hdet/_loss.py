"""Each step's training loss, recorded from the script's own backward calls.

Under hdet the scheduler must report every step's loss without the script
passing it. Every `.backward()` on a one-element tensor (and
torch.autograd.backward on one) is recorded; scheduler.step() takes the sum
of what was recorded since the previous step. The sum is the step's
objective under gradient accumulation (scripts divide each micro-batch loss
by the number of micro-batches) and with several losses per step. A loss
scaled by AMP's GradScaler is recorded unscaled, and an iteration whose
step GradScaler skips (inf/NaN gradients) records nothing: the scaler does
not call an unfused optimizer's step then, so its loss would otherwise be
added to the next step's. Values stay tensors (no device sync per step)
until the window ends.
"""

from __future__ import annotations

import threading
import weakref

import torch

_pending: list[torch.Tensor] = []
_guard = threading.local()
_installed = False
_watched: weakref.WeakSet = weakref.WeakSet()  # the attached optimizers
_steps = 0  # their step() calls so far


def _record(t):
    if torch.is_tensor(t) and t.numel() == 1:
        u = getattr(t, "_hdet_unscaled", None)
        _pending.append((t if u is None else u).detach().reshape(()).float())


def take():
    """The sum of the losses recorded since the last call, or None."""
    if not _pending:
        return None
    vals = list(_pending)
    _pending.clear()
    return vals[0] if len(vals) == 1 else torch.stack([v.to(vals[0].device) for v in vals]).sum()


def _wrap_backward(orig, first_tensor):
    def backward(*args, **kwargs):
        if getattr(_guard, "inside", False):  # Tensor.backward calls autograd.backward
            return orig(*args, **kwargs)
        t = args[0] if args else kwargs.get("tensors" if not first_tensor else "self")
        if isinstance(t, (list, tuple)) and len(t) == 1:
            t = t[0]
        _record(t)
        _guard.inside = True
        try:
            return orig(*args, **kwargs)
        finally:
            _guard.inside = False

    backward.__wrapped__ = orig  # type: ignore[attr-defined]
    backward.__doc__ = orig.__doc__
    return backward


def _wrap_scale(orig):
    def scale(self, outputs):
        out = orig(self, outputs)
        if torch.is_tensor(outputs) and torch.is_tensor(out) and outputs.numel() == 1:
            out._hdet_unscaled = outputs.detach()  # type: ignore[attr-defined]
        return out

    scale.__wrapped__ = orig  # type: ignore[attr-defined]
    return scale


def watch(optimizer):
    """Drop the loss of an iteration in which GradScaler skips optimizer."""
    _watched.add(optimizer)


def stepped():
    """Count a watched optimizer's step() call."""
    global _steps
    _steps += 1


def _wrap_scaler_step(orig):
    def step(self, optimizer, *args, **kwargs):
        before = _steps
        out = orig(self, optimizer, *args, **kwargs)
        if _steps == before and optimizer in _watched:
            take()  # skipped: this iteration's loss belongs to no step
        return out

    step.__wrapped__ = orig  # type: ignore[attr-defined]
    return step


def install():
    """Hook backward (once per process)."""
    global _installed
    if _installed:
        return
    _installed = True
    torch.Tensor.backward = _wrap_backward(torch.Tensor.backward, True)  # type: ignore[method-assign]
    torch.autograd.backward = _wrap_backward(torch.autograd.backward, False)
    scalers = [getattr(getattr(torch, "amp", None), "GradScaler", None),
               getattr(getattr(getattr(torch, "cuda", None), "amp", None), "GradScaler", None)]
    for cls in {c for c in scalers if c is not None}:
        if "scale" in cls.__dict__:  # a subclass inherits its parent's wrapper
            cls.scale = _wrap_scale(cls.scale)
        if "step" in cls.__dict__:
            cls.step = _wrap_scaler_step(cls.step)
