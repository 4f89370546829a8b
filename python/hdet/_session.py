"""The worker side of one hdet rank: handshake, shared buffer, window exchange."""

from __future__ import annotations

import hashlib
import inspect
import json
import mmap
import os
import time
from collections.abc import Sequence
from typing import Any, Callable, NoReturn, cast

import torch

from ._protocol import PROTOCOL_VERSION, Connection, ProtocolError, pack_float64s

ENV_SOCKET = "HDET_SOCKET"
ENV_BUFFER_FD = "HDET_BUFFER_FD"
ENV_TRACE_DIR = "HDET_TRACE_DIR"


def under_hdet() -> bool:
    """True when this process was started by `hdet run --worker`."""
    return bool(os.environ.get(ENV_SOCKET))


def _env_int(name: str, fallback: str, default: int) -> int:
    return int(os.environ.get(name, os.environ.get(fallback, str(default))))


def rank() -> int:
    """This replica's rank under hdet (RANK, else 0, outside it)."""
    return _env_int("HDET_RANK", "RANK", 0)


def world_size() -> int:
    """The number of replicas under hdet (WORLD_SIZE, else 1, outside it)."""
    return _env_int("HDET_WORLD_SIZE", "WORLD_SIZE", 1)


def local_rank() -> int:
    return _env_int("HDET_LOCAL_RANK", "LOCAL_RANK", 0)


def dist_world_size() -> int:
    """The size of the script's torch.distributed world, 0 without one."""
    d = torch.distributed
    return d.get_world_size() if d.is_available() and d.is_initialized() else 0


def script_sync_mode() -> str:
    """What the script does: "gradients" when its torch.distributed world is
    the whole run (its DDP all-reduces gradients every step across every
    rank), else "local": no world, or one replica's (train.replica_size > 1,
    whose replicas hdet averages every window)."""
    n = dist_world_size()
    return "gradients" if n > 0 and n == world_size() else "local"


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


class Stopped(SystemExit):
    """hdet ended the run before the script's last step (a signal asked it
    to checkpoint and stop); the script exits with status 0 unless it
    catches this."""

    def __init__(self, step: int) -> None:
        super().__init__(0)
        self.step = step

    def __str__(self) -> str:
        return "hdet stopped the run at step %d" % self.step


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


class Session:
    """The connection to this rank's hdet process and the shared buffer.

    Layout of the buffer (float32): every parameter of every param group, in
    order, flattened (of a sharded one, FSDP2's, this rank's local shard);
    then, in local mode, one slot per parameter for its
    optimizer state (floating-point state tensors, keys sorted), sized by
    predict_state. A parameter without state yet leaves its slot alone.

    on_error(message) is called once when the session reports a failure, so
    the owner can mark itself finished."""

    def __init__(self, optimizer: torch.optim.Optimizer, hello: dict[str, Any]) -> None:
        self.optimizer = optimizer
        self.params = [p for g in optimizer.param_groups for p in g["params"]]
        self.sharded, unsupported = sharding(self.params)
        self.param_count = sum(local(p).numel() for p in self.params)
        self.mode = script_sync_mode()
        self.local = self.mode == "local"
        self._layout = predict_state(optimizer) if self.local else []
        state_count = sum(n for _, entries in self._layout for _, n in entries)
        self._trace = None
        self.finished = False
        # The hand-over's phases, in seconds, for the next DONE (hdet puts
        # them into the window record, docs/performance.md); _sent is when
        # the last DONE was written (perf_counter), 0 before the first.
        self.timing: dict[str, float] = {}
        self._sent = 0.0
        # Writes the script's state at hdet's SAVE (None: not resumable).
        self.on_save: Callable[[dict[str, Any]], None] | None = None
        self.conn = Connection.connect(os.environ[ENV_SOCKET])
        hello = dict(hello, protocol=PROTOCOL_VERSION, pid=os.getpid(), param_count=self.param_count,
                     state_count=state_count, dtype="float32", buffers=["fd"], sync_mode=self.mode,
                     dist_world_size=dist_world_size(), sharded=self.sharded)
        if unsupported:
            hello["unsupported"] = unsupported  # hdet refuses the run with it (exit 2)
        self.conn.send({"type": "hello", "hello": hello})
        welcome = self.expect("welcome")
        if welcome.get("protocol") != PROTOCOL_VERSION:
            self.fail("hdet speaks protocol %s, this package speaks %d" % (welcome.get("protocol"), PROTOCOL_VERSION))
        self.rank = welcome.get("rank", 0)
        buf = welcome.get("buffer") or {}
        floats = self.param_count + state_count
        if buf.get("kind") != "fd" or buf.get("floats") != floats:
            self.fail("unusable buffer %r for %d floats" % (buf, floats))
        # An anonymous file hdet passed at exec: nothing in /dev/shm to leak.
        fd = int(os.environ[ENV_BUFFER_FD])
        self._mmap = mmap.mmap(fd, floats * 4)
        os.close(fd)  # the mapping keeps it; the script's subprocesses need not
        self.buf = torch.frombuffer(self._mmap, dtype=torch.float32, count=floats)
        trace_dir = os.environ.get(ENV_TRACE_DIR)
        if trace_dir:
            self._trace = open(os.path.join(trace_dir, "trace-rank%d.jsonl" % self.rank), "a")
            self.trace(event="start", rank=self.rank, pid=os.getpid())
        # The optimizer state too: a script that resumed its own checkpoint
        # has state before the first step, which the first load must keep.
        self._copy(out=True, with_state=self.local)
        self.conn.send({"type": "ready"})

    def expect(self, kind: str) -> dict[str, Any]:
        msg, _ = self.conn.recv()
        if msg["type"] != kind:
            self.fail("expected %s from hdet, got %s" % (kind, msg["type"]))
        return msg

    def report(self, message: str) -> None:
        """Tell hdet why the script stops (once)."""
        if self.finished:
            return
        self.finished = True
        try:
            self.conn.send({"type": "error", "message": message})
        except OSError:
            pass

    def fail(self, why: str) -> NoReturn:
        """Tell hdet why, then raise."""
        self.report(why)
        raise ProtocolError("hdet: " + why)

    @torch.no_grad()
    def _copy(self, out: bool, with_state: bool) -> None:
        """Parameters (and optimizer state) into the buffer (out) or back."""
        off = 0
        for p in self.params:
            v = local(p)
            n = v.numel()
            if out:
                self.buf[off:off + n].copy_(v.detach().reshape(-1))
            else:
                v.copy_(self.buf[off:off + n].view_as(v))
            off += n
        if not with_state:
            return
        for p, entries in self._layout:
            st = self.optimizer.state.get(p)
            for k, n in entries:
                if st:
                    t = st.get(k)
                    if torch.is_tensor(t):
                        t = local(t)
                    if not torch.is_tensor(t) or t.numel() != n:
                        self.fail("optimizer state %r of a %s parameter is not the predicted %d floats"
                                  % (k, tuple(p.shape), n))
                    if out:
                        self.buf[off:off + n].copy_(t.reshape(-1))
                    else:
                        t.copy_(self.buf[off:off + n].view_as(t))
                off += n

    def _load(self, msg: dict[str, Any]) -> None:
        """Copy what hdet left in the buffer (the average) into the tensors."""
        if msg.get("load"):
            self._copy(out=False, with_state=self.local and msg.get("load_optimizer", False))

    def next_message(self, evaluate: Callable[[], Sequence[float]] | None) -> dict[str, Any] | None:
        """Serve EVAL requests until a PLAN (returned) or a STOP (None)."""
        while True:
            msg, _ = self.conn.recv()
            kind = msg["type"]
            if kind not in ("eval", "plan", "stop", "save"):
                self.fail("unexpected %s from hdet between windows" % kind)
            if kind == "save":
                self._save(msg)
                continue
            got, now = time.perf_counter(), time.time()
            if self._sent and kind == "plan":
                self.timing["wait"] = got - self._sent
                if msg.get("sent_at"):
                    # The PLAN's trip is part of the wait; the two clocks
                    # differ by their reads' microseconds, so it is capped.
                    self.timing["plan_socket"] = min(max(0.0, now - msg["sent_at"]), self.timing["wait"])
            self._load(msg)
            self.timing["load"] = self.timing.get("load", 0.0) + time.perf_counter() - got
            if msg.get("load") and self._trace is not None:  # hashing 1 MB per window only when tracing
                self.trace(event="load", before=kind, window=msg.get("window", 0),
                           params_sha256=self.params_sha256(), params_sum=self.params_sum())
            if kind == "eval":
                if evaluate is None:
                    self.conn.send({"type": "result"}, pack_float64s([float("nan")] * 2))
                else:
                    loss, acc = evaluate()
                    self.conn.send({"type": "result", "supported": True}, pack_float64s([float(loss), float(acc)]))
                continue
            if kind == "stop":
                self.finished = True
                self.close()
                return None
            return msg

    def _save(self, msg: dict[str, Any]) -> None:
        """SAVE: take the converged values as the next PLAN would, have the
        script's state written, answer SAVED."""
        if self.on_save is None:
            self.fail("hdet asked to save the script's state, but the script gave hdet none (attach(..., state=...))")
        self._copy(out=False, with_state=self.local)
        answer = {"type": "saved", "path": msg.get("path"), "step": msg.get("step")}
        try:
            self.on_save(msg)
        except OSError as e:
            # A full or read-only disk: hdet skips this checkpoint, as it
            # does when its own write is refused, and the run goes on.
            answer["refused"] = str(e)
        except Exception as e:  # whatever the script's objects raise in state_dict()
            if self.finished:  # on_save reported it
                raise
            self.fail("saving the script's state to %s failed: %s" % (msg.get("path"), e))
        self.conn.send(answer)

    def hand_over(self) -> None:
        """The window is trained: its parameters go to the buffer."""
        t = time.perf_counter()
        self._copy(out=True, with_state=self.local)
        self.timing["copy_out"] = time.perf_counter() - t

    def done(self, window: int, steps: int, losses: list[float], applied: dict[str, list[float]],
             base_lr: list[float], probe: float | None = None) -> None:
        """Report the window (losses, then the probe loss when asked)."""
        if self._trace is not None:
            self.trace(event="done", window=window, steps=steps, applied=applied, base_lr=base_lr,
                       loss_mean=sum(losses) / len(losses), params_sha256=self.params_sha256(),
                       params_sum=self.params_sum())
        extra = [] if probe is None else [probe]
        t = time.perf_counter()
        self.conn.send({"type": "done", "window": window, "steps": steps, "applied": applied, "base_lr": base_lr,
                        "timing": self.timing, "sent_at": time.time()}, pack_float64s(list(losses) + extra))
        self._sent = time.perf_counter()
        self.timing = {"send": self._sent - t}

    def params_sha256(self) -> str:
        return hashlib.sha256(memoryview(self._mmap)[:self.param_count * 4]).hexdigest()

    def params_sum(self) -> float:
        """The sum of the buffer's parameters: the tests check a converge's
        average with it where ranks hold different shards."""
        return float(self.buf[:self.param_count].double().sum())

    def trace(self, **record: Any) -> None:
        """With HDET_TRACE_DIR set, log what this rank loaded and applied
        (the end-to-end tests compare ranks with it)."""
        if self._trace is not None:
            self._trace.write(json.dumps(record) + "\n")
            self._trace.flush()

    def close(self) -> None:
        self.conn.close()
        if self._trace is not None:
            self._trace.close()
            self._trace = None
