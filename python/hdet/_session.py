"""The worker side of one hdet rank: handshake, shared buffer, window exchange."""

import hashlib
import json
import mmap
import os

import torch

from ._protocol import (
    PROTOCOL_VERSION,
    Connection,
    ProtocolError,
    pack_float64s,
)

ENV_SOCKET = "HDET_SOCKET"
ENV_TRACE_DIR = "HDET_TRACE_DIR"


def under_hdet():
    """True when this process was started by `hdet run --worker`."""
    return bool(os.environ.get(ENV_SOCKET))


def rank():
    """This replica's rank under hdet (RANK, else 0, outside it)."""
    return int(os.environ.get("HDET_RANK", os.environ.get("RANK", "0")))


def world_size():
    """The number of replicas under hdet (WORLD_SIZE, else 1, outside it)."""
    return int(os.environ.get("HDET_WORLD_SIZE", os.environ.get("WORLD_SIZE", "1")))


def local_rank():
    return int(os.environ.get("HDET_LOCAL_RANK", os.environ.get("LOCAL_RANK", "0")))


def sync_mode():
    """"gradients" (the script's DDP runs every step), "local" (no DDP), or
    None outside hdet."""
    return os.environ.get("HDET_SYNC_MODE") or None


class Stopped(SystemExit):
    """hdet ended the run before the script's last step; the script exits
    with status 0 unless it catches this."""

    def __init__(self, step):
        super().__init__(0)
        self.step = step

    def __str__(self):
        return "hdet stopped the run at step %d" % self.step


class Session:
    """The connection to this rank's hdet process and the shared buffer.

    Layout of the buffer (float32): every parameter of every param group, in
    order, flattened; then, in local mode once the optimizer has state, every
    floating-point state tensor of every parameter (keys sorted)."""

    def __init__(self, optimizer, hello):
        self.optimizer = optimizer
        self.params = [p for g in optimizer.param_groups for p in g["params"]]
        self.param_count = sum(p.numel() for p in self.params)
        self._maps = []  # every mapping stays open: tensors may still view the old ones
        self._state = []  # the state tensors last written, in buffer order
        self._trace = None
        self.conn = Connection.connect(os.environ[ENV_SOCKET])
        hello = dict(hello, protocol=PROTOCOL_VERSION, pid=os.getpid(), param_count=self.param_count,
                     dtype="float32", buffers=["shm"])
        self.conn.send({"type": "hello", "hello": hello})
        welcome = self.expect("welcome")
        if welcome.get("protocol") != PROTOCOL_VERSION:
            self.fail("hdet speaks protocol %s, this package speaks %d" % (welcome.get("protocol"), PROTOCOL_VERSION))
        self.rank = welcome.get("rank", 0)
        self.sync_mode = welcome.get("sync_mode")
        buf = welcome.get("buffer") or {}
        if buf.get("kind") != "shm":
            self.fail("unsupported buffer kind %r" % buf.get("kind"))
        self._path = buf["path"]
        self._map(self.param_count)
        trace_dir = os.environ.get(ENV_TRACE_DIR)
        if trace_dir:
            self._trace = open(os.path.join(trace_dir, "trace-rank%d.jsonl" % self.rank), "a")
        self._write(with_state=False)
        self.conn.send({"type": "ready"})

    def expect(self, kind):
        msg, payload = self.conn.recv()
        if msg["type"] != kind:
            self.fail("expected %s from hdet, got %s" % (kind, msg["type"]))
        return msg

    def fail(self, why):
        """Tell hdet why, then raise."""
        try:
            self.conn.send({"type": "error", "message": why})
        except OSError:
            pass
        raise ProtocolError("hdet: " + why)

    def _map(self, floats):
        with open(self._path, "r+b") as f:
            if os.fstat(f.fileno()).st_size < floats * 4:
                os.posix_fallocate(f.fileno(), 0, floats * 4)
            mm = mmap.mmap(f.fileno(), floats * 4)
        self._maps.append(mm)
        self.buf = torch.frombuffer(mm, dtype=torch.float32, count=floats)

    def _state_tensors(self):
        out = []
        for p in self.params:
            st = self.optimizer.state.get(p)
            if not st:
                continue
            for k in sorted(st, key=str):
                t = st[k]
                if torch.is_tensor(t) and t.is_floating_point():
                    out.append(t)
        return out

    @torch.no_grad()
    def _write(self, with_state):
        """Copy the parameters (and optimizer state) into the buffer; returns
        the number of state floats."""
        off = 0
        for p in self.params:
            n = p.numel()
            self.buf[off:off + n].copy_(p.detach().reshape(-1))
            off += n
        self._state = self._state_tensors() if with_state else []
        count = sum(t.numel() for t in self._state)
        if off + count > self.buf.numel():
            self._map(off + count)
        for t in self._state:
            n = t.numel()
            self.buf[off:off + n].copy_(t.reshape(-1))
            off += n
        return count

    @torch.no_grad()
    def _load(self, msg):
        """Copy what hdet left in the buffer back into the tensors."""
        if not msg.get("load"):
            return
        off = 0
        for p in self.params:
            n = p.numel()
            p.copy_(self.buf[off:off + n].view_as(p))
            off += n
        if msg.get("load_optimizer"):
            for t in self._state:
                n = t.numel()
                t.copy_(self.buf[off:off + n].view_as(t))
                off += n

    def next_message(self, evaluate):
        """Serve EVAL requests until a PLAN (returned) or a STOP (None)."""
        while True:
            msg, _ = self.conn.recv()
            kind = msg["type"]
            if kind == "eval":
                self._load(msg)
                self.trace(event="load", before="eval", params_sha256=self.params_sha256())
                if evaluate is None:
                    self.conn.send({"type": "result", "supported": False}, pack_float64s([float("nan")] * 2))
                else:
                    loss, acc = evaluate()
                    self.conn.send({"type": "result", "supported": True}, pack_float64s([float(loss), float(acc)]))
            elif kind in ("plan", "stop"):
                self._load(msg)
                if msg.get("load"):
                    self.trace(event="load", before=kind, window=msg.get("window", 0),
                               params_sha256=self.params_sha256())
                if kind == "stop":
                    self.close()
                    return None
                return msg
            else:
                self.fail("unexpected %s from hdet between windows" % kind)

    def done(self, window, steps, losses, applied):
        """The window is trained: hand over the parameters, report."""
        state = self._write(with_state=self.sync_mode == "local")
        self.trace(event="done", window=window, steps=steps, applied=applied,
                   loss_mean=sum(losses) / len(losses))
        self.conn.send({"type": "done", "window": window, "steps": steps, "applied": applied,
                        "state_count": state, "buffer_floats": self.param_count + state},
                       pack_float64s(losses))

    def params_sha256(self):
        return hashlib.sha256(memoryview(self._maps[-1])[:self.param_count * 4]).hexdigest()

    def trace(self, **record):
        """With HDET_TRACE_DIR set, log what this rank loaded and applied
        (the end-to-end tests compare ranks with it)."""
        if self._trace is not None:
            self._trace.write(json.dumps(record) + "\n")
            self._trace.flush()

    def close(self):
        self.conn.close()
        if self._trace is not None:
            self._trace.close()
            self._trace = None
