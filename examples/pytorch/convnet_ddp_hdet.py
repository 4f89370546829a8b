"""Train a small ConvNet on MNIST with DDP, AdamW and OneCycleLR (an ordinary torchrun script).

    torchrun --nproc_per_node 4 convnet_ddp.py --data data/mnist

convnet_ddp_hdet.py is this script with two lines changed (the scheduler's
import, and probe_dataset for the probe signal);
`mpirun -np 4 bin/hdet run --worker -- python3 convnet_ddp_hdet.py` runs it with every rank at its own learning rate around this schedule.
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
from hdet import OneCycleLR, probe_dataset


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


def load_mnist(folder, split, n):
    def find(name):
        for candidate in (name + ".gz", name):
            if os.path.exists(os.path.join(folder, candidate)):
                return os.path.join(folder, candidate)
        raise FileNotFoundError("%s not in %s" % (name, folder))

    images = read_idx(find("%s-images-idx3-ubyte" % split))[:n].float().div_(255).sub_(0.1307).div_(0.3081)
    labels = read_idx(find("%s-labels-idx1-ubyte" % split))[:n].long()
    return torch.utils.data.TensorDataset(images.unsqueeze(1), labels)


class ConvNet(nn.Module):
    def __init__(self):
        super().__init__()
        self.conv1 = nn.Conv2d(1, 8, 5)
        self.conv2 = nn.Conv2d(8, 16, 5)
        self.fc1 = nn.Linear(16 * 4 * 4, 64)
        self.fc2 = nn.Linear(64, 10)

    def forward(self, x):
        x = F.max_pool2d(F.relu(self.conv1(x)), 2)
        x = F.max_pool2d(F.relu(self.conv2(x)), 2)
        return self.fc2(F.relu(self.fc1(x.flatten(1))))


@torch.no_grad()
def evaluate(model, test):
    model.eval()
    images, labels = test.tensors
    out = model(images)
    model.train()
    return F.cross_entropy(out, labels).item(), (out.argmax(1) == labels).float().mean().item()


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--data", default="data/mnist", help="folder with the MNIST idx(.gz) files")
    ap.add_argument("--train-samples", type=int, default=60000)
    ap.add_argument("--test-samples", type=int, default=10000)
    ap.add_argument("--epochs", type=int, default=1)
    ap.add_argument("--batch-size", type=int, default=64)
    ap.add_argument("--max-lr", type=float, default=3e-3)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--save", default="", help="write the model and scheduler state here at the end")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(args.seed)
    dist.init_process_group("gloo")  # env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
    rank = dist.get_rank()

    train = load_mnist(args.data, "train", args.train_samples)
    test = load_mnist(args.data, "t10k", args.test_samples)
    sampler = torch.utils.data.distributed.DistributedSampler(train, seed=args.seed, drop_last=True)
    loader = torch.utils.data.DataLoader(train, batch_size=args.batch_size, sampler=sampler, drop_last=True)
    model = ConvNet()
    probe_dataset(model, train)  # hdet compares the replicas on 1024 fixed training examples
    net = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(model.parameters(), lr=args.max_lr, weight_decay=1e-2)
    sched = OneCycleLR(opt, max_lr=args.max_lr, epochs=args.epochs, steps_per_epoch=len(loader))

    t0 = time.time()
    for epoch in range(args.epochs):
        sampler.set_epoch(epoch)
        for images, labels in loader:
            loss = F.cross_entropy(net(images), labels)
            opt.zero_grad()
            loss.backward()
            opt.step()
            sched.step()
        if rank == 0:
            print("epoch %d: loss %.4f, lr %.6f" % (epoch, loss.item(), sched.get_last_lr()[0]), flush=True)
    wall = time.time() - t0
    test_loss, acc = evaluate(model, test)
    if rank == 0:
        print("%d steps in %.2f s, test loss %.4f, test accuracy %.4f"
              % (args.epochs * len(loader), wall, test_loss, acc), flush=True)
    if args.save and rank == 0:
        torch.save({"model": model.state_dict(), "scheduler": sched.state_dict()}, args.save)


if __name__ == "__main__":
    main()
    dist.destroy_process_group()
