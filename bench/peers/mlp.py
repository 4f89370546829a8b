"""The built-in MNIST MLP's PyTorch twin (or the examples' ConvNet), trained plain or with one of hdet's peers (issue 39).

    .venv/bin/python bench/peers/mlp.py --max-lr 4.6e-3 --seed 4                      # (a) plain
    .venv/bin/python bench/peers/mlp.py --peer lrfind --seed 4                         # (b) torch-lr-finder
    .venv/bin/python bench/peers/mlp.py --peer prodigy --seed 4                        # (c) Prodigy
    .venv/bin/python bench/peers/mlp.py --peer schedulefree --max-lr 4.6e-3 --seed 4   # (d) Schedule-Free
    .venv/bin/python bench/peers/mlp.py --peer dadapt --seed 4                         # (e) D-Adaptation
    mpirun -np 4 bin/hdet run --run-dir DIR --progress none --worker -- \\
        .venv/bin/python bench/peers/mlp.py --hdet [--probe] --max-lr 4.6e-3 --seed 4  # (g), (h)

784-256-256-10 MLP, ReLU, dropout 0.1 after each hidden layer, inputs
standardised with MNIST's mean 0.1307 and deviation 0.3081 (as hdet's
built-in workload), batch 64, cross-entropy, weight decay 0.01; AdamW
(betas 0.9/0.999) or SGD momentum 0.9 (--optimizer sgd) under torch's
OneCycleLR at --max-lr (pct_start 0.25 as bench/configs/sweep.yaml,
cycle_momentum off: the betas and the momentum stay as written). The data
are data/mnist's IDX files read with numpy and gzip. One process, one
thread (--threads). --model convnet trains examples/pytorch/convnet.py's
ConvNet (two 5x5 convolutions of 8 and 16 channels with max-pooling, a
64-unit hidden layer, no dropout) on the same data instead. The last line is a JSON object with the final test
loss ("test_loss"), accuracy, steps, extra steps (the range test's), the
learning rate used and the peer.

Peers, each with its own code from PyPI (python/requirements.lock):
  plain         the optimizer at --max-lr.
  lrfind        torch-lr-finder's range test (exponential, 1e-7 .. 10, 100
                steps, its defaults' fastai variant) on the same model and
                optimizer, its steepest-descent suggestion (LRFinder.plot's
                suggest_lr), then plain training from the restored initial
                state at max_lr = the suggestion; --max-lr is not used.
  prodigy       prodigyopt.Prodigy at its recommended lr=1.0 (weight decay
                0.01 decoupled, safeguard_warmup=True as its README asks
                under a warm-up) with the same OneCycleLR shape at max_lr 1.
  schedulefree  schedulefree.AdamWScheduleFree (SGDScheduleFree with
                momentum 0.9 for --optimizer sgd) at lr = --max-lr, no
                schedule, its own warm-up over 5 % of the steps; train()/eval()
                switched with the model's.
  dadapt        dadaptation.DAdaptAdam (decouple=True, weight decay 0.01;
                DAdaptSGD momentum 0.9 for --optimizer sgd) at lr=1.0 with the
                same OneCycleLR shape at max_lr 1.
--hdet adds `hdet.attach(optimizer, total_steps=steps)` (plain peer only),
--probe also `hdet.probe_dataset(model, train_set)` (1024 fixed training
examples); --same-ranks attaches with alpha=0 and the search off (issue
51's like-for-like rows: the same ranks as hdet's run, local SGD, at
--max-lr). Outside hdet these lines do nothing.
"""

import argparse
import gzip
import json
import os
import sys
import time

import numpy as np
import torch
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import OneCycleLR

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "examples", "pytorch"))
import convnet as examples_convnet  # (examples/pytorch/convnet.py: --model convnet's model)
import lrfind  # (bench/peers/lrfind.py: the range test both peers run)

MEAN, STD = 0.1307, 0.3081
SAME_RANKS = dict(alpha=0, auto={"enabled": False})  # hdet's ranks without its spread or search
BATCH = 64


def read_idx(path):
    with gzip.open(path, "rb") as f:
        data = f.read()
    dims = data[3]
    shape = [int.from_bytes(data[4 + 4 * i:8 + 4 * i], "big") for i in range(dims)]
    return np.frombuffer(data, dtype=np.uint8, offset=4 + 4 * dims).reshape(shape)


def load(folder, kind):
    """Standardised images and labels; the decompressed arrays are cached in
    $PEERS_CACHE (default /tmp/hdet-peers-cache) keyed by the files' sizes and times."""
    files = [os.path.join(folder, "%s-%s-idx%d-ubyte.gz" % (kind, part, d)) for part, d in (("images", 3), ("labels", 1))]
    key = "-".join("%d-%d" % (os.stat(f).st_size, os.stat(f).st_mtime_ns) for f in files)
    cache = os.path.join(os.environ.get("PEERS_CACHE", "/tmp/hdet-peers-cache"), "mnist-%s-%s.npz" % (kind, key))
    try:
        with np.load(cache) as z:
            x, y = z["x"], z["y"]
    except (OSError, KeyError, ValueError):
        x, y = read_idx(files[0]).reshape(-1, 784), read_idx(files[1])
        os.makedirs(os.path.dirname(cache), exist_ok=True)
        tmp = "%s.%d.npz" % (cache[:-4], os.getpid())
        np.savez(tmp, x=x, y=y)
        os.replace(tmp, cache)
    x = (torch.from_numpy(x.astype(np.float32)) / 255 - MEAN) / STD
    return x, torch.from_numpy(y.astype(np.int64))


class MLP(nn.Sequential):
    def __init__(self, dropout=0.1):
        super().__init__(nn.Linear(784, 256), nn.ReLU(), nn.Dropout(dropout),
                         nn.Linear(256, 256), nn.ReLU(), nn.Dropout(dropout), nn.Linear(256, 10))


def convnet():
    """examples/pytorch/convnet.py's model, on the flat standardised images."""
    return nn.Sequential(nn.Unflatten(1, (1, 28, 28)), examples_convnet.ConvNet())


MODELS = {"mlp": MLP, "convnet": convnet}


@torch.no_grad()
def evaluate(model, x, y):
    model.eval()
    logits = torch.cat([model(b) for b in x.split(2000)])
    model.train()
    return F.cross_entropy(logits, y).item(), (logits.argmax(1) == y).float().mean().item()


def batches(x, y, epochs):
    """Shuffled batches of 64 (the last partial batch of an epoch dropped), from torch's global generator."""
    per_epoch = len(x) // BATCH
    for _ in range(epochs):
        order = torch.randperm(len(x))
        for i in range(per_epoch):
            idx = order[i * BATCH:(i + 1) * BATCH]
            yield x[idx], y[idx]


def base_optimizer(kind, params, lr):
    if kind == "sgd":
        return torch.optim.SGD(params, lr=lr, momentum=0.9, weight_decay=0.01)
    return torch.optim.AdamW(params, lr=lr, betas=(0.9, 0.999), weight_decay=0.01)


def range_test(model, opt, x, y, seed):
    """torch-lr-finder's suggestion on shuffled training batches (lrfind.py)."""
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(x, y), batch_size=BATCH, shuffle=True,
                                         generator=torch.Generator().manual_seed(seed))
    return lrfind.suggest(model, opt, nn.CrossEntropyLoss(), loader)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer", default="plain", choices=["plain", "lrfind", "prodigy", "schedulefree", "dadapt"])
    ap.add_argument("--optimizer", default="adamw", choices=["adamw", "sgd"])
    ap.add_argument("--model", default="mlp", choices=sorted(MODELS))
    ap.add_argument("--max-lr", type=float, default=1e-3)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--train-samples", type=int, default=60000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--data", default="data/mnist")
    ap.add_argument("--hdet", action="store_true", help="add hdet.attach (the plain peer only)")
    ap.add_argument("--probe", action="store_true", help="also hdet.probe_dataset on fixed training examples")
    ap.add_argument("--same-ranks", action="store_true", help="with --hdet: spread 0, no search (the same ranks)")
    args = ap.parse_args()
    if (args.hdet or args.probe or args.same_ranks) and args.peer != "plain":
        ap.error("--hdet, --probe and --same-ranks go with --peer plain")
    if args.same_ranks and (args.probe or not args.hdet):
        ap.error("--same-ranks goes with --hdet and without --probe")
    torch.set_num_threads(args.threads)

    x, y = load(args.data, "train")
    x, y = x[:args.train_samples], y[:args.train_samples]
    tx, ty = load(args.data, "t10k")
    steps = args.epochs * (len(x) // BATCH)
    torch.manual_seed(args.seed)
    model = MODELS[args.model]()
    extra, lr = 0, args.max_lr

    if args.peer == "lrfind":
        lr, extra = range_test(model, base_optimizer(args.optimizer, model.parameters(), 1e-7), x, y, args.seed)
        if lr is None:
            raise SystemExit("torch-lr-finder gave no suggestion")
    sched_free = False
    if args.peer in ("plain", "lrfind"):
        opt = base_optimizer(args.optimizer, model.parameters(), lr)
    elif args.peer == "prodigy":
        from prodigyopt import Prodigy
        lr = 1.0
        opt = Prodigy(model.parameters(), lr=lr, weight_decay=0.01, safeguard_warmup=True)
    elif args.peer == "dadapt":
        import dadaptation
        lr = 1.0
        if args.optimizer == "sgd":
            opt = dadaptation.DAdaptSGD(model.parameters(), lr=lr, momentum=0.9, weight_decay=0.01)
        else:
            opt = dadaptation.DAdaptAdam(model.parameters(), lr=lr, weight_decay=0.01, decouple=True)
    else:
        import schedulefree
        sched_free, warmup = True, max(1, steps // 20)
        if args.optimizer == "sgd":
            opt = schedulefree.SGDScheduleFree(model.parameters(), lr=lr, momentum=0.9, weight_decay=0.01,
                                               warmup_steps=warmup)
        else:
            opt = schedulefree.AdamWScheduleFree(model.parameters(), lr=lr, betas=(0.9, 0.999), weight_decay=0.01,
                                                 warmup_steps=warmup)
    rank = 0
    if args.hdet:  # the one line (and the probe's), right after the optimizer is built
        import hdet
        if args.probe:
            hdet.probe_dataset(model, torch.utils.data.TensorDataset(x, y))
        opt = hdet.attach(opt, total_steps=steps, **(SAME_RANKS if args.same_ranks else {}))
        rank = hdet.rank() if hdet.under_hdet() else 0
    sched = None if sched_free else OneCycleLR(opt, max_lr=lr, total_steps=steps, pct_start=0.25,
                                               cycle_momentum=False)

    model.train()
    if sched_free:
        opt.train()
    t0 = time.time()
    for bx, by in batches(x, y, args.epochs):
        loss = F.cross_entropy(model(bx), by)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        opt.step()
        if sched is not None:
            sched.step()
    seconds = time.time() - t0
    if sched_free:
        opt.eval()
    if rank == 0:
        test_loss, acc = evaluate(model, tx, ty)
        used = lr
        if args.peer in ("prodigy", "dadapt"):  # the adapted step size d times the peak lr
            used = opt.param_groups[0]["d"] * lr
        print(json.dumps({"peer": args.peer, "model": args.model, "optimizer": args.optimizer, "hdet": args.hdet, "probe": args.probe,
                          "seed": args.seed, "max_lr": args.max_lr, "lr_used": used, "steps": steps,
                          "extra_steps": extra, "seconds": round(seconds, 2), "train_loss": round(loss.item(), 5),
                          "test_loss": test_loss, "test_acc": acc}), flush=True)


if __name__ == "__main__":
    main()
