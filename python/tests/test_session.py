"""hdet._session.Session against an in-process stand-in for hdet's side of
the protocol (a real Unix socket and a real memfd buffer)."""

from __future__ import annotations

import os
import socket
import tempfile
import threading
import unittest
from unittest import mock

import torch

from hdet import _session
from hdet._protocol import PROTOCOL_VERSION, Connection


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
        with tempfile.TemporaryDirectory() as d:
            path = os.path.join(d, "hdet.sock")
            listener = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
            listener.bind(path)
            listener.listen(1)
            fd = os.memfd_create("hdet-test")
            got: dict = {}
            server = threading.Thread(target=serve_one_plan, args=(listener, os.dup(fd), got))
            server.start()
            env = {_session.ENV_SOCKET: path, _session.ENV_BUFFER_FD: str(os.dup(fd))}
            with mock.patch.dict(os.environ, env):
                s = _session.Session(opt, {"hyperparameters": ["lr"], "param_groups": []})
                with torch.no_grad():
                    for st in opt.state.values():  # what the first window must not keep
                        for v in st.values():
                            v.zero_()
                self.assertEqual(s.next_message(None)["type"], "plan")
            server.join()
            s.close()
            listener.close()
            os.close(fd)
        self.assertEqual(got["ready"], "ready")
        self.assertGreater(got["hello"]["state_count"], 0, "local mode hands the optimizer state over")
        for k, st in enumerate(opt.state.values()):
            for v, w in zip([v for v in st.values() if torch.is_tensor(v)], want[k]):
                self.assertTrue(torch.equal(v, w))


if __name__ == "__main__":
    unittest.main()
