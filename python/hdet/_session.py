"""The worker side of one hdet rank: handshake, shared buffer, window exchange."""

from __future__ import annotations

import hashlib
import json
import mmap
import os
import time
from collections.abc import Sequence
from typing import Any, Callable, NoReturn

import torch

from ._buffer_layout import local, predict_state, sharding
from ._protocol import PROTOCOL_VERSION, Connection, ProtocolError, pack_float64s

__all__ = ["Session", "Stopped", "local", "local_rank", "rank", "sharding", "under_hdet", "world_size"]

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


class Stopped(SystemExit):
    """hdet ended the run before the script's last step (a signal asked it
    to checkpoint and stop); the script exits with status 0 unless it
    catches this."""

    def __init__(self, step: int) -> None:
        super().__init__(0)
        self.step = step

    def __str__(self) -> str:
        return "hdet stopped the run at step %d" % self.step


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
            if e.errno:
                answer["errno"] = e.errno  # hdet names the file system and its free space
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
