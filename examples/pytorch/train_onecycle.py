"""Train a small CNN on MNIST with torch's OneCycleLR (plain PyTorch).

Single process:   python3 train_onecycle.py --steps 600
DDP (gloo, CPU):  python3 -m torch.distributed.run --nproc_per_node 4 train_onecycle.py

train.py is this script moved to hdet; `diff train_onecycle.py train.py`
shows everything that changed.
"""

import argparse
import gzip
import os
import struct
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import OneCycleLR


def read_idx(path):
    """An MNIST idx file (gzip or plain) as a uint8 tensor."""
    opener = gzip.open if path.endswith(".gz") else open
    with opener(path, "rb") as f:
        data = f.read()
    zero, kind, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0 or kind != 0x08:
        raise ValueError("%s: not an unsigned-byte idx file" % path)
    dims = struct.unpack(">" + "I" * ndim, data[4:4 + 4 * ndim])
    return torch.frombuffer(bytearray(data[4 + 4 * ndim:]), dtype=torch.uint8).reshape(dims)


def load_mnist(folder, split):
    def find(name):
        for candidate in (name + ".gz", name):
            if os.path.exists(os.path.join(folder, candidate)):
                return os.path.join(folder, candidate)
        raise FileNotFoundError("%s not in %s (scripts/mnist-data.sh %s fills it)" % (name, folder, folder))

    images = read_idx(find("%s-images-idx3-ubyte" % split)).float().div_(255).sub_(0.1307).div_(0.3081)
    labels = read_idx(find("%s-labels-idx1-ubyte" % split)).long()
    return images.unsqueeze(1), labels


class Net(nn.Module):
    def __init__(self, dropout):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 5)
        self.conv2 = nn.Conv2d(8, 16, 5)
        self.fc1 = nn.Linear(16 * 4 * 4, 64)
        self.drop = nn.Dropout(dropout)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(self.drop(F.relu(self.fc1(x.flatten(1)))))


@torch.no_grad()
def evaluate(model, test):
    model.eval()
    images, labels = test
    out = model(images)
    model.train()
    return F.cross_entropy(out, labels).item(), (out.argmax(1) == labels).float().mean().item()


def batches(n, batch_size, rank, world, seed):
    """This rank's shard of a fresh permutation every epoch, forever."""
    epoch = 0
    while True:
        order = torch.randperm(n, generator=torch.Generator().manual_seed(seed + epoch))[rank::world]
        for i in range(0, len(order) - batch_size + 1, batch_size):
            yield order[i:i + batch_size]
        epoch += 1


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data/mnist", help="folder with the MNIST idx(.gz) files")
    ap.add_argument("--steps", type=int, default=600)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-lr", type=float, default=0.1)
    ap.add_argument("--weight-decay", type=float, default=5e-4)
    ap.add_argument("--dropout", type=float, default=0.2)
    ap.add_argument("--eval-samples", type=int, default=2000, help="test images used for evaluation")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--log-every", type=int, default=50)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    ddp = int(os.environ.get("WORLD_SIZE", "1")) > 1  # set by torchrun (and by hdet in gradients mode)
    if ddp:
        dist.init_process_group("gloo")
    rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
    images, labels = load_mnist(args.data, "train")
    test = tuple(t[:args.eval_samples] for t in load_mnist(args.data, "t10k"))

    torch.manual_seed(args.seed)
    model = Net(args.dropout)
    net = nn.parallel.DistributedDataParallel(model) if ddp else model
    opt = torch.optim.SGD(model.parameters(), lr=args.max_lr, momentum=0.9, nesterov=True,
                          weight_decay=args.weight_decay)
    sched = OneCycleLR(opt, max_lr=args.max_lr, total_steps=args.steps)

    t0 = time.time()
    for step, idx in zip(range(args.steps), batches(len(labels), args.batch_size, rank, world, args.seed)):
        loss = F.cross_entropy(net(images[idx]), labels[idx])
        opt.zero_grad()
        loss.backward()
        opt.step()
        sched.step()
        if rank == 0 and (step % args.log_every == 0 or step == args.steps - 1):
            print("step %d loss %.4f lr %.5f" % (step, loss.item(), opt.param_groups[0]["lr"]), flush=True)
    wall = time.time() - t0
    test_loss, acc = evaluate(model, test)
    if rank == 0:
        print("rank %d: %d steps in %.2f s, test loss %.4f, test accuracy %.4f"
              % (rank, args.steps, wall, test_loss, acc), flush=True)


if __name__ == "__main__":
    main()
