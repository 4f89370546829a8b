"""hdet: run a PyTorch training script under hdet with one added line.

    optimizer = hdet.attach(torch.optim.AdamW(model.parameters(), lr=3e-4), total_steps=max_iters)

Whatever learning rate the script (its scheduler, or its own loop) sets is
the base; under `mpirun -np N hdet run --worker -- python train.py` each
rank's optimizer steps at base x its planned multiplier, and hdet averages
the replicas every window. Outside hdet the line installs nothing.
hdet.probe_dataset(model, dataset) lets hdet compare the replicas on fixed
examples (without it, by their training losses at the end of windows
whose rates anneal to zero, which is less exact). `from hdet import OneCycleLR` in place of torch's is the
import-only path.
"""

from ._attach import attach, checkpoint_path, current, start_step
from ._probe import probe_dataset
from ._protocol import PROTOCOL_VERSION, ProtocolError
from ._session import Stopped, local_rank, rank, under_hdet, world_size
from ._values import dropout_setter
from .scheduler import OneCycleLR, probe

__all__ = [
    "PROTOCOL_VERSION",
    "OneCycleLR",
    "ProtocolError",
    "Stopped",
    "attach",
    "checkpoint_path",
    "current",
    "dropout_setter",
    "local_rank",
    "probe",
    "probe_dataset",
    "rank",
    "start_step",
    "under_hdet",
    "world_size",
]
__version__ = "0.2.0"
