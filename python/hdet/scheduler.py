"""hdet.OneCycleLR: torch's OneCycleLR that attaches its optimizer to hdet."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any, Callable, Literal

import torch
from torch.optim.lr_scheduler import OneCycleLR as _TorchOneCycleLR

from . import _attach, _resume


def probe(fn: Callable[[], float] | None) -> Callable[[], float] | None:
    """Give hdet a probe function for the `probe` signal (docs/design.md §1.1).

    fn() -> float evaluates the current model, in eval mode and without
    gradients, on fixed examples (the same on every rank; e.g. 1024 training
    examples drawn with a fixed seed). hdet calls it at the end of windows on
    the average of the window's last iterates and compares the ranks' answers.
    Call it any time before the first optimizer step (or pass probe= to
    hdet.attach). Without it hdet uses each rank's training loss (`signal:
    train`). Outside hdet it does nothing."""
    return _attach.register_probe(fn)


class OneCycleLR(_TorchOneCycleLR):
    """torch.optim.lr_scheduler.OneCycleLR whose optimizer is attached to hdet.

    The import-only path: `from hdet import OneCycleLR` in place of torch's.
    Every OneCycleLR argument means what it means in torch, and the class is
    torch's OneCycleLR (the same rates at every step, the same state_dict)
    plus hdet.attach(optimizer, total_steps) with these keyword arguments:
    hdet_window, hdet_alpha, hdet_spread, hdet_auto, explore,
    dropout_callback, callbacks, evaluate, probe, hdet_state,
    hdet_start_step (attach's window, alpha, spread, auto, explore,
    dropout, callbacks, evaluate, probe, state, start_step). With hdet_state
    (a dict, {} included) the scheduler itself is saved and resumed with it,
    as "hdet.OneCycleLR". verbose is
    accepted for scripts written for torch < 2.7 and must be False.

    step(loss) accepts a loss for compatibility; hdet records each step's
    loss from the script's .backward() calls."""

    def __init__(self, optimizer: torch.optim.Optimizer, max_lr: float | list[float],
                 total_steps: int | None = None, epochs: int | None = None,
                 steps_per_epoch: int | None = None, pct_start: float = 0.3, anneal_strategy: Literal["cos", "linear"] = "cos",
                 cycle_momentum: bool = True, base_momentum: float | list[float] = 0.85,
                 max_momentum: float | list[float] = 0.95, div_factor: float = 25.0,
                 final_div_factor: float = 1e4, three_phase: bool = False, last_epoch: int = -1,
                 verbose: bool = False, *, hdet_window: int | None = None, hdet_alpha: float | None = None,
                 hdet_spread: str | None = None, hdet_auto: dict[str, Any] | None = None,
                 explore: Sequence[Any] | None = None, dropout_callback: Callable[[float], Any] | None = None,
                 callbacks: dict[str, Callable[[float], Any]] | None = None,
                 evaluate: Callable[[], Sequence[float]] | None = None,
                 probe: Callable[[], float] | None = None, hdet_state: dict[str, Any] | None = None,
                 hdet_start_step: int | None = None) -> None:
        if verbose:
            raise ValueError("hdet.OneCycleLR: verbose=True is not supported (torch 2.7 removed the argument); "
                             "print get_last_lr() instead")
        super().__init__(optimizer, max_lr, total_steps=total_steps, epochs=epochs,
                         steps_per_epoch=steps_per_epoch, pct_start=pct_start,
                         anneal_strategy=anneal_strategy, cycle_momentum=cycle_momentum,
                         base_momentum=base_momentum, max_momentum=max_momentum,
                         div_factor=div_factor, final_div_factor=final_div_factor,
                         three_phase=three_phase, last_epoch=last_epoch)
        state = None if hdet_state is None else dict(_resume.check_state(hdet_state, "hdet.OneCycleLR") or {},
                                                      **{"hdet.OneCycleLR": self})
        _attach.attach(optimizer, self.total_steps, window=hdet_window, explore=explore, alpha=hdet_alpha,
                       spread=hdet_spread, auto=hdet_auto, dropout=dropout_callback, callbacks=callbacks,
                       evaluate=evaluate, probe=probe, state=state, start_step=hdet_start_step,
                       _by="hdet.OneCycleLR")

    def step(self, loss: Any = None, epoch: Any = None) -> None:  # type: ignore[override]
        if epoch is not None:
            raise TypeError("hdet.OneCycleLR.step: the epoch argument is deprecated in torch; call step()")
        super().step()
