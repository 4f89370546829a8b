"""hdet._session.Session against an in-process stand-in for hdet's side of
the protocol (a real Unix socket and a real memfd buffer)."""

from __future__ import annotations

import contextlib
import io
import os
import socket
import tempfile
import threading
import unittest
from collections.abc import Callable, Iterator
from unittest import mock

import torch

from hdet import _resume, _session
from hdet._protocol import PROTOCOL_VERSION, Connection, ProtocolError


def serve_one_plan(listener: socket.socket, fd: int, got: dict) -> None:
    """HELLO -> WELCOME (the buffer sized as asked) -> READY, then a PLAN that
    loads the buffer's parameters and optimizer state back, as hdet's first
    plan does."""
    sock, _ = listener.accept()
    conn = Connection(sock)
    hello = conn.recv()[0]["hello"]
    floats = hello["param_count"] + hello["state_count"]
    os.ftruncate(fd, floats * 4)
    conn.send({"type": "welcome", "protocol": PROTOCOL_VERSION, "rank": 0, "world_size": 1,
               "sync_mode": hello["sync_mode"], "buffer": {"kind": "fd", "fd": fd, "floats": floats}})
    got["ready"] = conn.recv()[0]["type"]
    conn.send({"type": "plan", "window": 0, "start": 0, "steps": 1, "values": {}, "load": True,
               "load_optimizer": True})
    got["hello"] = hello
    sock.close()


@contextlib.contextmanager
def served(opt: torch.optim.Optimizer, serve: Callable[[socket.socket, int, dict], None]) -> Iterator[tuple[_session.Session, dict]]:
    """A Session of opt connected to serve(listener, buffer fd, got), hdet's side, on a thread; yields it and got."""
    with tempfile.TemporaryDirectory() as d:
        path = os.path.join(d, "hdet.sock")
        listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
        listener.bind(path)
        listener.listen(1)
        fd = os.memfd_create("hdet-test")
        got: dict = {}
        server = threading.Thread(target=serve, args=(listener, os.dup(fd), got))
        server.start()
        s = None
        try:
            with mock.patch.dict(os.environ, {_session.ENV_SOCKET: path, _session.ENV_BUFFER_FD: str(os.dup(fd))}):
                s = _session.Session(opt, {"hyperparameters": ["lr"], "param_groups": []})
                yield s, got
        finally:
            server.join()
            if s is not None:
                s.close()
            listener.close()
            os.close(fd)


class ResumedStateTest(unittest.TestCase):
    def test_resumed_optimizer_state_survives_the_first_plan(self):
        """A script that resumed its own checkpoint has optimizer state before
        the first step: READY hands it over with the parameters, so the first
        plan's load (local mode) gives it back unchanged."""
        torch.manual_seed(0)
        model = torch.nn.Linear(4, 3)
        opt = torch.optim.AdamW(model.parameters(), lr=1e-2)
        model(torch.randn(8, 4)).pow(2).mean().backward()
        opt.step()  # the state a checkpoint would bring back
        want = {k: [v.clone() for v in st.values() if torch.is_tensor(v)] for k, st in enumerate(opt.state.values())}
        with served(opt, serve_one_plan) as (s, got):
            with torch.no_grad():
                for st in opt.state.values():  # what the first window must not keep
                    for v in st.values():
                        v.zero_()
            self.assertEqual(s.next_message(None)["type"], "plan")
        self.assertEqual(got["ready"], "ready")
        self.assertGreater(got["hello"]["state_count"], 0, "local mode hands the optimizer state over")
        for k, st in enumerate(opt.state.values()):
            for v, w in zip([v for v in st.values() if torch.is_tensor(v)], want[k]):
                self.assertTrue(torch.equal(v, w))


def serve_save(listener: socket.socket, fd: int, got: dict) -> None:
    """HELLO -> WELCOME -> READY, then the converge (the buffer's values
    become 0.5) and a SAVE without load flags, then a PLAN; records what the
    worker answered."""
    sock, _ = listener.accept()
    conn = Connection(sock)
    hello = conn.recv()[0]["hello"]
    floats = hello["param_count"] + hello["state_count"]
    os.ftruncate(fd, floats * 4)
    conn.send({"type": "welcome", "protocol": PROTOCOL_VERSION, "rank": 0, "world_size": 1,
               "sync_mode": hello["sync_mode"], "buffer": {"kind": "fd", "fd": fd, "floats": floats}})
    conn.recv()
    with open(fd, "r+b", closefd=False) as f:
        f.write(torch.full((floats,), 0.5).numpy().tobytes())
    conn.send({"type": "save", "path": "/x/rank-0/search-step-0.pt", "step": 0, "pass": "search"})
    got["answer"] = conn.recv()[0]
    if got["answer"]["type"] == "saved":
        conn.send({"type": "plan", "window": 0, "start": 0, "steps": 1, "values": {}})
    sock.close()


class SaveTest(unittest.TestCase):
    def run_save(self, on_save):
        torch.manual_seed(0)
        opt = torch.optim.AdamW(torch.nn.Linear(4, 3).parameters(), lr=1e-2)
        opt.param_groups[0]["params"][0].grad = None
        with served(opt, serve_save) as (s, got):
            s.on_save = on_save(s) if on_save else None
            return s.next_message(None), got

    def test_save_takes_the_converged_values_then_answers_saved(self):
        seen = []

        def on_save(s):
            return lambda msg: seen.append((msg, [p.detach().clone() for p in s.params]))

        plan, got = self.run_save(on_save)
        self.assertEqual(plan["type"], "plan", "the window goes on after the save")
        self.assertEqual(got["answer"], {"type": "saved", "path": "/x/rank-0/search-step-0.pt", "step": 0})
        msg, params = seen[0]
        self.assertEqual((msg["step"], msg["pass"]), (0, "search"))
        for p in params:
            self.assertTrue(torch.equal(p, torch.full_like(p, 0.5)), "saved after loading the converge")

    def test_save_to_a_script_that_gave_no_state(self):
        with self.assertRaisesRegex(ProtocolError, r"the script gave hdet none \(attach\(\.\.\., state=\.\.\.\)\)"):
            self.run_save(None)

    def test_a_refused_save_answers_saved_with_why_and_runs_on(self):
        def on_save(s):
            def full(msg):
                raise OSError(28, "No space left on device")
            return full

        plan, got = self.run_save(on_save)
        self.assertEqual(plan["type"], "plan", "a full disk skips hdet's checkpoint, the window goes on")
        self.assertEqual(got["answer"], {"type": "saved", "path": "/x/rank-0/search-step-0.pt", "step": 0,
                                         "refused": "[Errno 28] No space left on device", "errno": 28})

    def test_a_failed_save_answers_error(self):
        def on_save(s):
            def fail(msg):
                raise ValueError("the loader cannot say where it is")
            return fail

        with self.assertRaisesRegex(ProtocolError, "saving the script's state to /x/rank-0/search-step-0.pt failed: "
                                    "the loader cannot say where it is"):
            self.run_save(on_save)


class WriteTest(unittest.TestCase):
    def test_a_refused_write_leaves_no_partial_file(self):
        class Full:
            def __reduce__(self):
                raise OSError(28, "No space left on device")

        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "rank-0", "search-step-5.pt")
            _resume.write(path, None)
            with self.assertRaises(OSError):
                _resume.write(path, {"x": Full()})
            self.assertEqual(os.listdir(os.path.dirname(path)), ["search-step-5.pt"], "the old file stays, no .tmp")
            self.assertTrue(torch.load(path, weights_only=False)["fresh"])

    def test_a_disk_full_inside_torch_save_stays_an_oserror(self):
        """torch.save's zip writer turns a write's OSError into a RuntimeError
        (the 40-fault chaos soak: "unexpected pos 64 vs 0"); the client keeps
        the OSError, which SAVED answers as refused."""
        class FullAfter(io.BytesIO):
            def write(self, b):
                if self.tell() + len(b) > 64:
                    raise OSError(28, "No space left on device")
                return super().write(b)

        with tempfile.TemporaryDirectory() as d, \
                mock.patch.object(_resume, "open", lambda *a, **k: FullAfter(), create=True):
            with self.assertRaises(OSError) as cm:
                _resume.write(os.path.join(d, "x.pt"), {"w": torch.zeros(1000)})
            self.assertEqual(cm.exception.errno, 28)

if __name__ == "__main__":
    unittest.main()
