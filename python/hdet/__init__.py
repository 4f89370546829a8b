"""hdet: run an existing PyTorch training script under hdet.

    from hdet import OneCycleLR, probe_dataset  # was: from torch.optim.lr_scheduler import OneCycleLR
    probe_dataset(model, train_set)             # lets hdet compare the replicas on fixed examples

Nothing else changes. Outside hdet the scheduler is torch's OneCycleLR and
probe_dataset does nothing. Without a probe hdet compares the replicas by
their training losses, which lean to smaller learning rates.
Launched by `mpirun -np N hdet run --worker -- python3 train.py`, each rank
trains with its own learning rate around the script's schedule and hdet
averages the replicas every window.
"""

from ._protocol import PROTOCOL_VERSION, ProtocolError
from ._session import Stopped, local_rank, rank, sync_mode, under_hdet, world_size
from ._probe import probe_dataset
from .scheduler import OneCycleLR, dropout_setter, probe

__all__ = [
    "OneCycleLR",
    "PROTOCOL_VERSION",
    "ProtocolError",
    "Stopped",
    "dropout_setter",
    "local_rank",
    "probe",
    "probe_dataset",
    "rank",
    "sync_mode",
    "under_hdet",
    "world_size",
]
__version__ = "0.1.0"
