"""A regression MLP written as a user writes one (issue 51's no-harm check), plain or under hdet.

    .venv/bin/python bench/noharm/regression.py --lr 3e-3 --seed 2                    # plain, one process
    mpirun -np 2 bin/hdet run --run-dir DIR --progress none --worker -- \\
        .venv/bin/python bench/noharm/regression.py --hdet [--probe] --lr 3e-3 --seed 2  # the attach line
    ... --hdet --no-search                                                              # same ranks, no search

A 16-64-64-1 ReLU MLP fits y = sin(2 x.w1) + 0.5 (x.w2)^2 - 0.5 + 0.1 noise
(x ~ N(0, I_16), the data drawn from seed 0: 4096 training, 1024
validation examples), MSE, batch 64, AdamW (weight decay 0.01) at --lr
under CosineAnnealingLR over the 400 steps. --seed seeds torch's generator, which draws
the weights and then the batches (under hdet each replica's own). --hdet adds the one line, `hdet.attach(opt, total_steps=400)`;
--probe also `hdet.probe_dataset(model, val_set, loss_fn=F.mse_loss)`, the
held-out set; --no-search attaches with `alpha=0, auto={"enabled": False}`
(the same ranks as hdet's run at the script's own rate: local SGD, the
replicas averaged every window). Outside hdet the lines do nothing. The
last line rank 0 prints is a JSON object with the final validation MSE.
"""

import argparse
import json
import time

import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import CosineAnnealingLR

STEPS, BATCH, DIM = 400, 64, 16


def data():
    g = torch.Generator().manual_seed(0)
    w1, w2 = torch.randn(DIM, generator=g) / DIM ** 0.5, torch.randn(DIM, generator=g) / DIM ** 0.5
    x = torch.randn(4096 + 1024, DIM, generator=g)
    y = torch.sin(2 * x @ w1) + 0.5 * (x @ w2) ** 2 - 0.5 + 0.1 * torch.randn(len(x), generator=g)
    return (x[:4096], y[:4096, None]), (x[4096:], y[4096:, None])


def train(lr, seed, hdet_line=None, probe=False):
    """Trains once; returns the final validation MSE (rank 0's under hdet, else None on other ranks).
    hdet_line: None (plain), "attach" or "no-search"."""
    torch.set_num_threads(1)
    (x, y), (vx, vy) = data()
    torch.manual_seed(seed)
    model = nn.Sequential(nn.Linear(DIM, 64), nn.ReLU(), nn.Linear(64, 64), nn.ReLU(), nn.Linear(64, 1))
    opt = torch.optim.AdamW(model.parameters(), lr=lr, weight_decay=0.01)
    rank = 0
    if hdet_line is not None:
        import hdet
        if probe:
            hdet.probe_dataset(model, torch.utils.data.TensorDataset(vx, vy), loss_fn=F.mse_loss)
        if hdet_line == "no-search":
            opt = hdet.attach(opt, total_steps=STEPS, alpha=0, auto={"enabled": False})
        else:
            opt = hdet.attach(opt, total_steps=STEPS)
        rank = hdet.rank() if hdet.under_hdet() else 0
    sched = CosineAnnealingLR(opt, T_max=STEPS)
    order, at = torch.randperm(len(x)), 0
    for _ in range(STEPS):
        if at + BATCH > len(x):
            order, at = torch.randperm(len(x)), 0
        idx = order[at:at + BATCH]
        at += BATCH
        loss = F.mse_loss(model(x[idx]), y[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
    if rank != 0:
        return None
    model.eval()
    with torch.no_grad():
        return F.mse_loss(model(vx), vy).item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--lr", type=float, default=3e-3)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--hdet", action="store_true")
    ap.add_argument("--probe", action="store_true")
    ap.add_argument("--no-search", action="store_true")
    args = ap.parse_args()
    line = None
    if args.hdet:
        line = "no-search" if args.no_search else "attach"
    t0 = time.time()
    val = train(args.lr, args.seed, line, args.probe)
    if val is not None:
        print(json.dumps({"lr": args.lr, "seed": args.seed, "hdet": args.hdet, "probe": args.probe,
                          "no_search": args.no_search, "seconds": round(time.time() - t0, 2), "val_mse": val}), flush=True)


if __name__ == "__main__":
    main()
