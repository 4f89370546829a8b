"""hdet._session.sharding on real DTensors: four gloo processes on one CPU
host, each checking the parameter forms hdet hands over (FSDP2's shards on
the world's 1-D mesh) or refuses (plain and sharded mixed, HSDP's 2-D mesh,
a mesh smaller than the world, Replicate placements)."""

from __future__ import annotations

import os
import socket
import tempfile
import unittest

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

from hdet import _session

WORLD = 4


def _cases() -> dict[str, tuple[bool, str]]:
    from torch.distributed.device_mesh import init_device_mesh
    from torch.distributed.tensor import Replicate, Shard, distribute_tensor

    flat = init_device_mesh("cpu", (WORLD,))
    square = init_device_mesh("cpu", (2, 2), mesh_dim_names=("replicate", "shard"))

    def param(mesh, placements):  # type: ignore[no-untyped-def]
        return torch.nn.Parameter(distribute_tensor(torch.ones(6, 3), mesh, placements))

    return {
        "fsdp2": _session.sharding([param(flat, [Shard(0)]), param(flat, [Shard(1)])]),
        "plain": _session.sharding([torch.nn.Parameter(torch.ones(3))]),
        "mixed": _session.sharding([param(flat, [Shard(0)]), torch.nn.Parameter(torch.ones(3))]),
        "hsdp": _session.sharding([param(square, [Replicate(), Shard(0)])]),
        "submesh": _session.sharding([param(square["shard"], [Shard(0)])]),
        "replicate": _session.sharding([param(flat, [Replicate()])]),
    }


def _worker(rank: int, port: int, out: str) -> None:
    os.environ.update(MASTER_ADDR="127.0.0.1", MASTER_PORT=str(port))
    dist.init_process_group("gloo", rank=rank, world_size=WORLD)
    try:
        got = _cases()
        if rank == 0:
            torch.save(got, out)
    finally:
        dist.destroy_process_group()


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


class TestSharding(unittest.TestCase):
    got: dict[str, tuple[bool, str]]

    @classmethod
    def setUpClass(cls) -> None:
        with tempfile.TemporaryDirectory() as d:
            out = os.path.join(d, "got.pt")
            mp.spawn(_worker, args=(_free_port(), out), nprocs=WORLD)
            cls.got = torch.load(out)

    def test_accepted(self) -> None:
        self.assertEqual(self.got["fsdp2"], (True, ""))
        self.assertEqual(self.got["plain"], (False, ""))

    def test_refused(self) -> None:
        for case, words in (("mixed", "1 of the optimizer's 2 parameters are sharded DTensors and the others are not"),
                            ("hsdp", "2-D device mesh"),
                            ("submesh", "sharded over 2 ranks, but the script's torch.distributed world has 4"),
                            ("replicate", "placements")):
            with self.subTest(case):
                sharded, why = self.got[case]
                self.assertTrue(sharded)
                self.assertIn(words, why)


if __name__ == "__main__":
    unittest.main()
