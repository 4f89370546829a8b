"""What of the script's tensors hdet's shared buffer holds: each
parameter's part on this rank (FSDP2's local shard of a sharded one,
whether hdet can average such shards), and, in local sync mode, the
optimizer state the first step will create, sized before it exists."""

from __future__ import annotations

import inspect
from typing import Any, cast

import torch


def _dtensor_type() -> type | None:
    try:
        from torch.distributed.tensor import DTensor
    except ImportError:  # a torch without torch.distributed
        return None
    return DTensor


def local(t: torch.Tensor) -> torch.Tensor:
    """The part of t this rank holds: a DTensor's local shard (a view that
    writes through to it), else t itself."""
    dt = _dtensor_type()
    return cast(Any, t).to_local() if dt is not None and isinstance(t, dt) else t


def _sharded(p: torch.Tensor, dt: type | None) -> bool:
    """p is a DTensor over more than one rank (on a mesh of one rank its
    local tensor is the whole parameter: a plain one for hdet)."""
    return dt is not None and isinstance(p, dt) and cast(Any, p).device_mesh.size() > 1


def sharding(params: list[torch.Tensor]) -> tuple[bool, str]:
    """Whether the parameters are sharded (FSDP2's fully_shard: every
    parameter a DTensor sharded over the script's whole torch world), and
    why hdet cannot hand them over ("" when it can). hdet averages each
    rank's local shards across replicas as they are, which is only the
    average of the model when every rank of the replica holds a disjoint
    part (Shard placements on a 1-D mesh of the replica's ranks) and every
    parameter is sharded (a plain one would be averaged by each position on
    its own, in its own order, and the copies drift apart by rounding)."""
    dt = _dtensor_type()
    sharded = [p for p in params if _sharded(p, dt)]
    if not sharded:
        return False, ""
    if len(sharded) < len(params):
        plain = next(p for p in params if not _sharded(p, dt))
        return True, ("%d of the optimizer's %d parameters are sharded DTensors and the others are not (one of shape %s): "
                      "hdet averages either shards or whole parameters; apply fully_shard to the root module too, "
                      "so every parameter is sharded" % (len(sharded), len(params), tuple(plain.shape)))
    d = torch.distributed
    world = d.get_world_size() if d.is_available() and d.is_initialized() else 0
    for p in sharded:
        mesh, placements = cast(Any, p).device_mesh, cast(Any, p).placements
        if mesh.ndim != 1:
            return True, ("a parameter of shape %s is a DTensor on a %d-D device mesh %s (HSDP, or FSDP with tensor "
                          "parallelism); hdet handles FSDP2 on a 1-D mesh of the replica's ranks: with "
                          "train.replica_size, hdet's replicas already play HSDP's replicate dimension"
                          % (tuple(p.shape), mesh.ndim, tuple(mesh.shape)))
        if mesh.size() != world:
            return True, ("a parameter of shape %s is sharded over %d ranks, but the script's torch.distributed world "
                          "has %d: shard over the whole world, which hdet makes the replica (fully_shard's default mesh)"
                          % (tuple(p.shape), mesh.size(), world))
        if any(type(pl).__name__ != "Shard" for pl in placements):
            return True, ("a parameter of shape %s has placements %s; hdet averages FSDP2's shards (Shard "
                          "placements); replicate a model inside the replica with DDP instead"
                          % (tuple(p.shape), placements))
    return True, ""


StateLayout = list[tuple[torch.Tensor, list[tuple[str, int]]]]


def predict_state(optimizer: torch.optim.Optimizer) -> StateLayout:
    """The optimizer state step() will create, as [(param, [(key, floats)])].

    torch creates optimizer state at the first step, but the shared buffer
    must have its final size from the start (the engine maps it once). So a
    copy of the optimizer takes one step over 2-element stand-ins (on each
    group's device): a state tensor of 2 elements is shaped like its
    parameter, one of 1 is a scalar (Adam's step); anything else is not
    elementwise and cannot be averaged slot by slot."""
    stand_ins, groups = [], []
    for g in optimizer.param_groups:
        ps = []
        for p in g["params"]:
            s = torch.zeros(2, device=p.device, dtype=p.dtype, requires_grad=True)
            s.grad = torch.zeros(2, device=p.device, dtype=p.dtype)
            ps.append(s)
        stand_ins.append(ps)
        groups.append(dict({k: v for k, v in g.items() if k != "params"}, params=ps))
    cls = type(optimizer)
    params = inspect.signature(cls.__init__).parameters
    any_key = any(p.kind is inspect.Parameter.VAR_KEYWORD for p in params.values())
    # defaults may hold keys the constructor does not take (torch 2.15's
    # AdamW: decoupled_weight_decay); each group carries its options anyway.
    defaults = {k: v for k, v in optimizer.defaults.items() if any_key or k in params}
    try:
        probe = cls(groups, **defaults)
        probe.step()
    except Exception as e:  # any optimizer of any library: say which one failed, and why
        raise RuntimeError("hdet: cannot size the state of %s for local sync mode (%s); use sync mode gradients"
                           % (type(optimizer).__name__, e)) from e
    layout: StateLayout = []
    for g, ps in zip(optimizer.param_groups, stand_ins):
        for p, s in zip(g["params"], ps):
            entries = []
            st = probe.state.get(s, {})
            for k in sorted(st, key=str):
                t = st[k]
                if not (torch.is_tensor(t) and t.is_floating_point()):
                    continue
                if t.numel() not in (1, 2):
                    raise RuntimeError("hdet: %s state %r is not elementwise; use sync mode gradients"
                                       % (type(optimizer).__name__, k))
                entries.append((k, local(p).numel() if t.numel() == 2 else 1))
            layout.append((p, entries))
    return layout
