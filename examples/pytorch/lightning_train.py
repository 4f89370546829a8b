"""Train a small classifier with Lightning (an ordinary Lightning script).

    python examples/pytorch/lightning_train.py
    mpirun -np 4 bin/hdet run --worker -- .venv/bin/python examples/pytorch/lightning_train.py

The hdet change is one import and HdetCallback() in the Trainer's
callbacks: under hdet each rank's Trainer trains one replica at its own
multiple of the rate the OneCycleLR schedule sets, and hdet compares the
replicas on 256 fixed items of the validation data; outside hdet the
callback changes nothing. The data is a mixture of Gaussians (10 classes
in 32 dimensions, drawn from --seed: nothing to download); the model an MLP
trained with AdamW, OneCycleLR stepped every optimizer step, gradients
accumulated over --accumulate batches. Logs and checkpoints go under
--root (Lightning's default_root_dir); --ckpt-path resumes a fit. The last
line is a JSON line with the validation loss and accuracy.
"""

import argparse
import json

import lightning as L
import torch
import torch.nn.functional as F
from lightning.pytorch.callbacks import ModelCheckpoint
from lightning.pytorch.loggers import CSVLogger
from torch import nn
from torch.utils.data import DataLoader, TensorDataset

from hdet.integrations.lightning import HdetCallback


def mixture(n, seed, classes=10, dim=32):
    """n points of `classes` Gaussians around fixed centres."""
    centres = torch.randn(classes, dim, generator=torch.Generator().manual_seed(1234)) * 0.5
    g = torch.Generator().manual_seed(seed)
    y = torch.randint(0, classes, (n,), generator=g)
    x = centres[y] + torch.randn(n, dim, generator=g)
    return TensorDataset(x, y)


class Classifier(L.LightningModule):
    def __init__(self, lr=3e-3, weight_decay=0.05, hidden=128, dropout=0.1):
        super().__init__()
        self.save_hyperparameters()
        self.net = nn.Sequential(nn.Linear(32, hidden), nn.ReLU(), nn.Dropout(dropout),
                                 nn.Linear(hidden, hidden), nn.ReLU(), nn.Linear(hidden, 10))

    def forward(self, x):
        return self.net(x)

    def training_step(self, batch, batch_idx):
        x, y = batch
        loss = F.cross_entropy(self(x), y)
        self.log("train_loss", loss)
        return loss

    def validation_step(self, batch, batch_idx):
        x, y = batch
        logits = self(x)
        self.log("val_loss", F.cross_entropy(logits, y), prog_bar=True)
        self.log("val_acc", (logits.argmax(-1) == y).float().mean())

    def configure_optimizers(self):
        opt = torch.optim.AdamW(self.parameters(), lr=self.hparams.lr, weight_decay=self.hparams.weight_decay)
        sched = torch.optim.lr_scheduler.OneCycleLR(opt, max_lr=self.hparams.lr,
                                                    total_steps=self.trainer.estimated_stepping_batches)
        return {"optimizer": opt, "lr_scheduler": {"scheduler": sched, "interval": "step"}}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--root", default="runs/lightning")
    ap.add_argument("--epochs", type=int, default=3)
    ap.add_argument("--max-steps", type=int, default=-1)
    ap.add_argument("--train-size", type=int, default=8192)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--accumulate", type=int, default=1)
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--save-every", type=int, default=50, help="optimizer steps between checkpoints")
    ap.add_argument("--log-every", type=int, default=10)
    ap.add_argument("--ckpt-path", help="a checkpoint to resume from, or 'last'")
    ap.add_argument("--no-progress-bar", action="store_true")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    L.seed_everything(args.seed)
    train = DataLoader(mixture(args.train_size, args.seed + 1), batch_size=args.batch_size, shuffle=True)
    val = DataLoader(mixture(2048, args.seed + 2), batch_size=256)
    model = Classifier(lr=args.lr)
    checkpoints = ModelCheckpoint(every_n_train_steps=args.save_every, save_last=True, save_top_k=-1)
    trainer = L.Trainer(
        max_epochs=args.epochs,
        max_steps=args.max_steps,
        accumulate_grad_batches=args.accumulate,
        default_root_dir=args.root,
        # A CSV log reads without TensorBoard (Lightning's default logger
        # once tensorboard is installed); hdet's values go to either.
        logger=CSVLogger(args.root),
        log_every_n_steps=args.log_every,
        callbacks=[HdetCallback(), checkpoints],
        enable_progress_bar=not args.no_progress_bar,
        enable_model_summary=False,
    )
    trainer.fit(model, train, val, ckpt_path=args.ckpt_path)
    metrics = trainer.validate(model, val, verbose=False)[0]
    print(json.dumps({"val_loss": metrics["val_loss"], "val_acc": metrics["val_acc"], "steps": trainer.global_step}))


if __name__ == "__main__":
    main()
