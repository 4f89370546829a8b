"""Each step's training loss, recorded from the script's own backward calls.

Under hdet the scheduler must report every step's loss without the script
passing it. While an optimizer is attached, every backward of a
one-element tensor (`loss.backward()`, torch.autograd.backward on one) is
recorded; the attached optimizer's step takes the sum of what was recorded
since its previous step. The sum is the step's objective under gradient
accumulation (scripts divide each micro-batch loss by the number of
micro-batches) and with several losses per step. A loss scaled by AMP's
GradScaler is recorded unscaled, and an iteration whose step GradScaler
skips (inf/NaN gradients) records nothing: the scaler does not call an
unfused optimizer's step then, so its loss would otherwise be added to the
next step's. Values stay tensors (no device sync per step) until the
window ends.

What this touches, and why nothing narrower does. The attached optimizer
counts its own steps with a step pre-hook (torch's public hook, on that
optimizer alone). No public hook hands over the loss of a backward (torch
2.15, read for this): the parameters' hooks (Tensor.register_hook,
register_post_accumulate_grad_hook) and the autograd nodes' hooks see
gradients, not the tensor backward started from; a forward hook would need
the model, and sees its output, not the loss the loop computes from it;
node_creation_hook and TorchFunctionMode see every operation of the
process, a cost on each; an optimizer's step sees a loss only through a
closure, which loops rarely pass. The scaler the script builds is never
handed to hdet. So, from attach under hdet until hdet's STOP (close()), and
only then, the recorder wraps three functions of the process, listed in
LossRecorder.PATCHES:
- torch.autograd.backward, through which Tensor.backward also goes;
- GradScaler.scale (torch.amp's class, which torch.cuda.amp's inherits):
  the scaled loss remembers the unscaled one;
- GradScaler.step: a step it skipped for the attached optimizer drops the
  iteration's loss.
Each wrapper calls the function it replaced with the same arguments and
returns its result. Tested with torch 2.15; python/tests/test_loss.py fails
if Tensor.backward stops going through torch.autograd.backward, if a
GradScaler step it skips calls the optimizer's step, or if GradScaler stops
setting found_inf on a fused optimizer (_attachment._skipped reads it).
"""

from __future__ import annotations

import types
from typing import Any, Callable

import torch


class LossRecorder:
    """The losses of the attached optimizer's steps, recorded from backward
    calls while the run is attached (one per process: hdet attaches one
    optimizer)."""

    # What the recorder replaces for the whole process while it is open.
    PATCHES = ("torch.autograd.backward", "torch.amp.grad_scaler.GradScaler.scale",
               "torch.amp.grad_scaler.GradScaler.step")

    def __init__(self, optimizer: torch.optim.Optimizer) -> None:
        self.optimizer = optimizer
        self.pending: list[torch.Tensor] = []  # recorded since the last take()
        self.steps = 0  # the optimizer's step() calls that ran
        self.patched: list[str] = []  # what of the process it has replaced now
        self._undo: list[Callable[[], None]] = []
        hook = optimizer.register_step_pre_hook(self._stepped)
        self._undo.append(hook.remove)
        self._wrap(torch.autograd, "backward", self._wrap_backward)
        for cls in _scalers():
            if "scale" in cls.__dict__:  # a subclass inherits its parent's wrapper
                self._wrap(cls, "scale", _wrap_scale)
            if "step" in cls.__dict__:
                self._wrap(cls, "step", self._wrap_scaler_step)

    def take(self) -> torch.Tensor | None:
        """The sum of the losses recorded since the last call, or None."""
        if not self.pending:
            return None
        vals = list(self.pending)
        self.pending.clear()
        return vals[0] if len(vals) == 1 else torch.stack([v.to(vals[0].device) for v in vals]).sum()

    def close(self) -> None:
        """Put back what the recorder wrapped (a wrapper someone installed
        over one of them stays, and so does ours under it)."""
        while self._undo:
            self._undo.pop()()
        self.patched.clear()
        self.pending.clear()

    def _stepped(self, optimizer: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        self.steps += 1

    def _record(self, t: Any) -> None:
        if torch.is_tensor(t) and t.numel() == 1:
            u = getattr(t, "_hdet_unscaled", None)
            self.pending.append((t if u is None else u).detach().reshape(()).float())

    def _wrap(self, owner: Any, name: str, make: Callable[[Any], Any]) -> None:
        orig = getattr(owner, name)
        wrapper = make(orig)
        wrapper.__wrapped__ = orig
        wrapper.__doc__ = orig.__doc__
        setattr(owner, name, wrapper)
        where = owner.__name__ if isinstance(owner, types.ModuleType) else owner.__module__ + "." + owner.__qualname__
        self.patched.append(where + "." + name)

        def undo() -> None:
            if getattr(owner, name) is wrapper:
                setattr(owner, name, orig)

        self._undo.append(undo)

    def _wrap_backward(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        def backward(*args: Any, **kwargs: Any) -> Any:
            t = args[0] if args else kwargs.get("tensors")
            if isinstance(t, (list, tuple)) and len(t) == 1:
                t = t[0]
            self._record(t)
            return orig(*args, **kwargs)

        return backward

    def _wrap_scaler_step(self, orig: Callable[..., Any]) -> Callable[..., Any]:
        def step(scaler: Any, optimizer: Any, *args: Any, **kwargs: Any) -> Any:
            before = self.steps
            out = orig(scaler, optimizer, *args, **kwargs)
            if self.steps == before and optimizer is self.optimizer:
                self.take()  # skipped: this iteration's loss belongs to no step
            return out

        return step


def _wrap_scale(orig: Callable[..., Any]) -> Callable[..., Any]:
    def scale(scaler: Any, outputs: Any) -> Any:
        out = orig(scaler, outputs)
        if torch.is_tensor(outputs) and torch.is_tensor(out) and outputs.numel() == 1:
            out._hdet_unscaled = outputs.detach()  # type: ignore[attr-defined]
        return out

    return scale


def _scalers() -> list[type]:
    """torch.amp.GradScaler, and torch.cuda.amp's where it is its own class."""
    found = [getattr(getattr(torch, "amp", None), "GradScaler", None),
             getattr(getattr(getattr(torch, "cuda", None), "amp", None), "GradScaler", None)]
    out: list[type] = []
    for c in found:
        if isinstance(c, type) and c not in out:
            out.append(c)
    return out
