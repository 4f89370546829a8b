"""What hdet may set on a rank: the hyperparameters an attached optimizer and
the script's callbacks offer, and how each is applied.

Two kinds. Optimizer-group values (the learning rate's multiplier, weight
decay, momentum) are read by optimizer.step() alone, so they are put in
place right before the step and the script's own values are restored right
after it: schedulers and the script's arithmetic only ever see their own
numbers. Callback values (dropout, custom scalars) shape the forward pass,
so they are set after a step for the next one and stay in place.
"""

from __future__ import annotations

from typing import Any, Callable

import torch

# Public dropout layers (torch's common base class, _DropoutNd, is private).
DROPOUT_LAYERS = (torch.nn.Dropout, torch.nn.Dropout1d, torch.nn.Dropout2d, torch.nn.Dropout3d,
                  torch.nn.AlphaDropout, torch.nn.FeatureAlphaDropout)


def dropout_setter(module: torch.nn.Module) -> Callable[[float], None]:
    """A callback that sets p on every dropout layer of module."""
    layers = [m for m in module.modules() if isinstance(m, DROPOUT_LAYERS)]
    if not layers:
        raise ValueError("hdet: %s has no dropout layer (nn.Dropout, Dropout1d/2d/3d, AlphaDropout)"
                         % type(module).__name__)

    def set_p(p: float) -> None:
        for m in layers:
            m.p = p

    return set_p


def group_keys(groups: list[dict[str, Any]]) -> list[str]:
    """Each param group's key: its "name" entry, else its index."""
    return [str(g.get("name", i)) for i, g in enumerate(groups)]


def is_lr(name: str) -> bool:
    return name == "lr" or name.startswith("lr/")


# (group, key, saved value): what restore() puts back after a step.
Saved = list[tuple[dict[str, Any], str, Any]]


def _put(group: dict[str, Any], key: str, value: Any, saved: Saved) -> None:
    old = group[key]
    if torch.is_tensor(old):  # a Tensor lr is changed in place, never replaced
        saved.append((group, key, old.clone()))
        old.copy_(value)
    else:
        saved.append((group, key, old))
        group[key] = value


def restore(saved: Saved) -> None:
    for group, key, old in reversed(saved):
        if torch.is_tensor(group[key]):
            group[key].copy_(old)
        else:
            group[key] = old


class Values:
    """The names a run may explore on this optimizer, and their appliers.

    Groups are named by index and read from the optimizer at each use:
    optimizer.load_state_dict (a script resuming its checkpoint, before or
    after attach) replaces param_groups with new dicts, and writing a rate
    into the old ones would leave the optimizer's untouched."""

    def __init__(self, optimizer: torch.optim.Optimizer, callbacks: dict[str, Callable[[float], Any]]) -> None:
        self.optimizer = optimizer
        keys = group_keys(self.groups)
        g0 = self.groups[0]
        every = list(range(len(self.groups)))
        # name -> the indices of the groups it sets. The built-in names this
        # client applies (here, and "dropout" through attach's dropout=) are
        # the rows of Go's hparam.Builtins with a PyTorch field;
        # tests/builtins_test.go checks the two agree.
        self.in_step: dict[str, list[int]] = {"lr": every}
        if "weight_decay" in g0:
            decayed = [i for i, g in enumerate(self.groups) if as_float(g["weight_decay"]) > 0] or every
            self.in_step["weight_decay"] = decayed
        if "betas" in g0 or "momentum" in g0:
            self.in_step["momentum"] = every
        if len(self.groups) > 1:
            for i, (k, g) in enumerate(zip(keys, self.groups)):
                self.in_step["lr/" + k] = [i]
                if "weight_decay" in g:
                    self.in_step["weight_decay/" + k] = [i]
        self.callbacks: dict[str, Callable[[float], Any]] = {}
        for name, fn in callbacks.items():
            if name in self.in_step:
                raise ValueError("hdet: callback %r would replace the optimizer's hyperparameter of that name" % name)
            if not callable(fn):
                raise TypeError("hdet: callback for %r is not callable" % name)
            self.callbacks[name] = fn

    def names(self) -> list[str]:
        return list(self.in_step) + list(self.callbacks)

    def enter(self, values: dict[str, float]) -> Saved:
        """Put one step's optimizer-group values in place: lr names multiply
        the group's current rate, the others replace the group's value."""
        saved: Saved = []
        for name, v in values.items():
            for g in (self.groups[i] for i in self.in_step.get(name, ())):
                if is_lr(name):
                    _put(g, "lr", g["lr"] * v, saved)
                elif name.startswith("momentum"):
                    if "betas" in g:
                        _put(g, "betas", (v, g["betas"][1]), saved)
                    else:
                        _put(g, "momentum", v, saved)
                else:
                    _put(g, name.split("/")[0], v, saved)
        return saved

    @property
    def groups(self) -> list[dict[str, Any]]:
        return self.optimizer.param_groups

    def between(self, values: dict[str, float]) -> None:
        """Set the callback values for the next forward pass."""
        for name, v in values.items():
            fn = self.callbacks.get(name)
            if fn is not None:
                fn(v)

    def base_lr(self) -> float:
        """The script's own rate of the first group, as it stands now."""
        return as_float(self.groups[0]["lr"])

    def expected_lr(self, values: dict[str, float], bases: list[float]) -> list[float] | None:
        """Each group's rate the step must use, None when lr is not planned."""
        mult = [1.0] * len(self.groups)
        planned = False
        for name, v in values.items():
            if is_lr(name) and name in self.in_step:
                planned = True
                for i in self.in_step[name]:
                    mult[i] *= v
        return [b * m for b, m in zip(bases, mult)] if planned else None


def as_float(x: Any) -> float:
    """A group's value as a float, whether a number or a Tensor (a Tensor
    lr of torch 2.x's capturable and compiled optimizers)."""
    return float(x.item()) if torch.is_tensor(x) else float(x)
