"""A Lightning script written as one that resumes itself after a requeue:
a ModelCheckpoint in a fixed folder with save_last, and fit(ckpt_path="last")
every launch, for the end-to-end resume test (tests/integrations_test.go).

A small classifier with dropout, AdamW and a OneCycleLR stepped every
optimizer step. Each epoch's order is a function of a seed and the epoch
(a sampler with set_epoch, which Lightning calls), so that a fit resumed at
an epoch's end draws the batches the stopped one would have; the seed is
the script's plus HDET_RANK (each replica its own order). --steps-per-epoch
is the number of batches of an epoch.

STOP_AT=PASS:STEP in the environment (search or main) makes HDET_RANK 0
send SIGUSR1 to its hdet at the start of that global step, as a time limit
would (hdet checkpoints at the window's end and exits 3); with --record DIR
every process appends a line per optimizer step to DIR/steps-rankR.jsonl
(its pid, pass and step).
"""

import argparse
import json
import os
import signal
import time

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from torch.utils.data import DataLoader, TensorDataset

from hdet.integrations.lightning import HdetCallback


class EpochSampler(torch.utils.data.Sampler):
    def __init__(self, n, seed):
        self.n, self.seed, self.epoch = n, seed, 0

    def set_epoch(self, epoch):
        self.epoch = epoch

    def __len__(self):
        return self.n

    def __iter__(self):
        return iter(torch.randperm(self.n, generator=torch.Generator().manual_seed(self.seed + self.epoch)).tolist())


class Classifier(L.LightningModule):
    def __init__(self, lr=3e-3):
        super().__init__()
        self.lr = lr
        self.net = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.ReLU(), torch.nn.Dropout(0.1),
                                       torch.nn.Linear(32, 3))

    def training_step(self, batch, i):
        x, y = batch
        loss = F.cross_entropy(self.net(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, i):
        x, y = batch
        self.log("val_loss", F.cross_entropy(self.net(x), y))

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.lr)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.lr, total_steps=self.trainer.estimated_stepping_batches)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


class StopAndRecord(L.Callback):
    """STOP_AT and --record (see the module's doc)."""

    def __init__(self, record):
        self.stop = os.environ.get("STOP_AT", "").split(":") if os.environ.get("STOP_AT") else None
        self.rank, self.pass_ = int(os.environ.get("HDET_RANK", "0")), os.environ.get("HDET_PASS") or "search"
        self.record = None
        if record:
            os.makedirs(record, exist_ok=True)
            self.record = open(os.path.join(record, "steps-rank%d.jsonl" % self.rank), "a")

    def on_train_batch_start(self, trainer, module, batch, i):
        if self.stop and self.rank == 0 and self.pass_ == self.stop[0] and trainer.global_step == int(self.stop[1]):
            os.kill(os.getppid(), signal.SIGUSR1)  # hdet, as mpirun forwards a time limit's signal
            time.sleep(0.5)  # a time limit's signal comes mid-step, not 1 ms before the window's end

    def on_train_start(self, trainer, module):
        if self.record is not None:
            trainer.optimizers[0].register_step_post_hook(lambda *_: self.recorded(trainer.global_step))

    def recorded(self, step):
        """A step trained: after its update, inside the step call, which hdet
        holds at a window's end until the next window (or ends the process)."""
        self.record.write(json.dumps({"pid": os.getpid(), "pass": self.pass_, "step": step}) + "\n")
        self.record.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", required=True)
    ap.add_argument("--max-steps", type=int, default=32)
    ap.add_argument("--steps-per-epoch", type=int, default=4)
    ap.add_argument("--window", type=int, default=4)
    ap.add_argument("--record")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    L.seed_everything(0)
    g = torch.Generator().manual_seed(1)
    x = torch.randn(2048, 8, generator=g)
    y = (x[:, :3].argmax(-1) + (x[:, 3] > 1).long()) % 3
    n = args.steps_per_epoch * 32
    train = DataLoader(TensorDataset(x[:n], y[:n]), batch_size=32,
                       sampler=EpochSampler(n, 10 + 1000 * int(os.environ.get("HDET_RANK", "0"))),
                       generator=torch.Generator())
    val = DataLoader(TensorDataset(x[1024:1280], y[1024:1280]), batch_size=128)
    trainer = L.Trainer(
        max_steps=args.max_steps, max_epochs=-1, default_root_dir=args.root, logger=False, log_every_n_steps=2,
        callbacks=[StopAndRecord(args.record), HdetCallback(probe_examples=128, window=args.window),
                   ModelCheckpoint(dirpath=os.path.join(args.root, "ckpts"), save_last=True, every_n_train_steps=6)],
        enable_progress_bar=False, enable_model_summary=False, num_sanity_val_steps=0, check_val_every_n_epoch=1000)
    trainer.fit(Classifier(), train, val, ckpt_path="last")
    total = sum(float(p.detach().double().sum()) for p in trainer.lightning_module.parameters())
    print("HDET-RESULT " + json.dumps({"param_sum": total, "global_step": trainer.global_step}), flush=True)


if __name__ == "__main__":
    main()
