"""Train a small byte-level GPT on the Python standard library's sources (an ordinary torchrun script).

    torchrun --nproc_per_node 4 examples/pytorch/gpt.py [--schedule onecycle|cosine|wsd]
    mpirun -np 4 bin/hdet run --worker -- .venv/bin/python examples/pytorch/gpt_hdet.py [--explore-temperature]

The learning-rate schedule is torch's OneCycleLR (--schedule onecycle, the
default), a linear warm-up and cosine decay set by hand every iteration as
nanoGPT does (cosine), or warm-up, stable, decay through LambdaLR (wsd).
--temperature divides the attention's logits (1: plain softmax attention).

gpt_hdet.py is this script with two added lines, `import hdet` and
hdet.attach(optimizer, total_steps) after the optimizer is built: under hdet
every rank trains at its own multiple of whatever rate the schedule sets,
and with --explore-temperature hdet also explores the softmax temperature
around --temperature (a custom scalar set through a callback).
gpt_hdet_probe.py adds one more line that registers hdet.probe, so hdet
compares the replicas on fixed validation windows. Without torchrun's
variables (RANK, WORLD_SIZE) the script trains in one process.

The corpus is the .py files of the standard library of the Python running
the script (tests and site-packages left out), split into training and
validation by a hash of each file's path: the same bytes wherever the same
Python build is installed, nothing to download. The first two lines name the
Python, the corpus's hash and a unigram model's validation bits per byte;
the last line is `final val_bpb X`, after the same result as a JSON line.
"""

import argparse
import hashlib
import json
import math
import os
import platform
import posixpath
import sysconfig
import time

import torch
import torch.distributed as dist
import torch.nn as nn
import torch.nn.functional as F
from torch.optim.lr_scheduler import LambdaLR, OneCycleLR

VOCAB = 256  # bytes
SEPARATOR = b"\0"  # between files; never inside a source file
SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}


def load_corpus():
    """(training bytes, validation bytes, description) from the standard library's .py files."""
    root = sysconfig.get_paths()["stdlib"]
    paths = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = [d for d in dirs if d not in SKIP_DIRS]
        rel = os.path.relpath(folder, root).replace(os.sep, "/")
        paths += [posixpath.normpath(posixpath.join(rel, f)) for f in files if f.endswith(".py")]
    train, val = [], []
    for path in sorted(paths):
        with open(os.path.join(root, path), "rb") as f:
            text = f.read()
        held_out = hashlib.sha256(path.encode()).digest()[0] < 26  # about 10% of the files
        (val if held_out else train).append(text)
    train, val = SEPARATOR.join(train), SEPARATOR.join(val)
    about = "Python %s stdlib %s: %d files, %d training / %d validation bytes, sha256 %s" % (
        platform.python_version(), root, len(paths), len(train), len(val),
        hashlib.sha256(train + SEPARATOR + val).hexdigest()[:12])
    return train, val, about


def as_tensor(data):
    return torch.frombuffer(bytearray(data), dtype=torch.uint8)


def unigram_bpb(train, val):
    """Bits per byte of the validation bytes under the training bytes' frequencies (add-one smoothing)."""
    p = (torch.bincount(train, minlength=VOCAB).double() + 1) / (len(train) + VOCAB)
    return -(torch.bincount(val, minlength=VOCAB).double() * p.log2()).sum().item() / len(val)


def fixed_windows(data, context, count, offset=0.0):
    """count windows of context + 1 bytes spread evenly over data, each
    starting offset (0 to 1) of the way to the next one's start."""
    gap = (len(data) - context - 1) / count
    starts = [int((i + offset) * gap) for i in range(count)]
    return data.unfold(0, context + 1, 1)[starts].long()


class CausalSelfAttention(nn.Module):
    def __init__(self, width, heads, temperature=1.0):
        super().__init__()
        self.heads = heads
        self.temperature = temperature  # softmax(q k^T / (sqrt(d) temperature))
        self.query = nn.Linear(width, width)
        self.key = nn.Linear(width, width)
        self.value = nn.Linear(width, width)
        self.proj = nn.Linear(width, width)

    def forward(self, x):
        B, T, C = x.shape
        q, k, v = (f(x).view(B, T, self.heads, C // self.heads).transpose(1, 2)
                   for f in (self.query, self.key, self.value))
        scores = q @ k.transpose(-2, -1) / (math.sqrt(C // self.heads) * self.temperature)
        future = torch.ones(T, T, dtype=torch.bool, device=x.device).triu(1)
        attn = scores.masked_fill(future, float("-inf")).softmax(dim=-1)
        return self.proj((attn @ v).transpose(1, 2).reshape(B, T, C))


class Block(nn.Module):
    def __init__(self, width, heads, temperature=1.0):
        super().__init__()
        self.ln1 = nn.LayerNorm(width)
        self.attn = CausalSelfAttention(width, heads, temperature)
        self.ln2 = nn.LayerNorm(width)
        self.mlp = nn.Sequential(nn.Linear(width, 4 * width), nn.GELU(), nn.Linear(4 * width, width))

    def forward(self, x):
        x = x + self.attn(self.ln1(x))
        return x + self.mlp(self.ln2(x))


class GPT(nn.Module):
    def __init__(self, layers, width, heads, context, temperature=1.0):
        super().__init__()
        self.tok = nn.Embedding(VOCAB, width)
        self.pos = nn.Embedding(context, width)
        self.blocks = nn.ModuleList(Block(width, heads, temperature) for _ in range(layers))
        self.ln_f = nn.LayerNorm(width)
        self.head = nn.Linear(width, VOCAB, bias=False)
        self.head.weight = self.tok.weight  # tied input and output embeddings
        self.apply(self._init)
        for block in self.blocks:  # GPT-2's scaled init of the residual projections
            for p in (block.attn.proj.weight, block.mlp[2].weight):
                nn.init.normal_(p, std=0.02 / math.sqrt(2 * layers))

    def set_temperature(self, temperature):
        """The attention's softmax temperature, in every block."""
        for block in self.blocks:
            block.attn.temperature = temperature

    @staticmethod
    def _init(m):
        if isinstance(m, (nn.Linear, nn.Embedding)):
            nn.init.normal_(m.weight, std=0.02)
        if isinstance(m, nn.Linear) and m.bias is not None:
            nn.init.zeros_(m.bias)

    def forward(self, idx):
        x = self.tok(idx) + self.pos(torch.arange(idx.size(1), device=idx.device))
        for block in self.blocks:
            x = block(x)
        return self.head(self.ln_f(x))


def param_groups(model, weight_decay):
    """Weight decay on matrices and embeddings, none on biases and LayerNorm (as nanoGPT)."""
    params = [p for p in model.parameters() if p.requires_grad]  # the tied weight once
    return [{"params": [p for p in params if p.dim() >= 2], "weight_decay": weight_decay},
            {"params": [p for p in params if p.dim() < 2], "weight_decay": 0.0}]


def cosine_lr(step, max_lr, warmup, total):
    """nanoGPT's get_lr: linear warm-up to max_lr, then cosine decay to max_lr / 10 at the last step."""
    if step < warmup:
        return max_lr * (step + 1) / (warmup + 1)
    ratio = (step - warmup) / max(1, total - 1 - warmup)
    return max_lr / 10 + 0.5 * (1.0 + math.cos(math.pi * ratio)) * (max_lr - max_lr / 10)


def wsd_factor(step, warmup, decay, total):
    """Warm-up, stable, decay: a linear warm-up, the full rate, then a linear decay over the last decay steps."""
    if step < warmup:
        return (step + 1) / (warmup + 1)
    return min(1.0, (total - step) / (decay + 1))


def lm_loss(logits, windows):
    return F.cross_entropy(logits.reshape(-1, VOCAB), windows[:, 1:].reshape(-1))


@torch.no_grad()
def evaluate(model, windows, batch_size=64):
    """Mean loss on windows (each: context inputs and the next bytes), in bits per byte."""
    was_training = model.training
    model.eval()
    total = 0.0
    for batch in windows.split(batch_size):
        total += lm_loss(model(batch[:, :-1]), batch).item() * len(batch)
    model.train(was_training)
    return total / len(windows) / math.log(2)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=500)
    ap.add_argument("--batch-size", type=int, default=16, help="windows per rank and step")
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--layers", type=int, default=4)
    ap.add_argument("--width", type=int, default=96)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--max-lr", type=float, default=3e-3)
    ap.add_argument("--schedule", choices=["onecycle", "cosine", "wsd"], default="onecycle",
                    help="torch's OneCycleLR; warm-up and cosine decay set by hand every step (nanoGPT); "
                         "warm-up, stable, decay through LambdaLR")
    ap.add_argument("--warmup-steps", type=int, default=-1, help="cosine and wsd: warm-up steps (default: 10%%)")
    ap.add_argument("--decay-steps", type=int, default=-1, help="wsd: the final decay's steps (default: 20%%)")
    ap.add_argument("--temperature", type=float, default=1.0, help="the attention's softmax temperature")
    ap.add_argument("--explore-temperature", action="store_true",
                    help="gpt_hdet*.py: hdet also explores the softmax temperature around --temperature")
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--val-windows", type=int, default=256, help="validation windows evaluated")
    ap.add_argument("--eval-every", type=int, default=0, help="also evaluate every N steps (and at step 0)")
    ap.add_argument("--threads", type=int, default=1, help="torch threads per process")
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--save", default="", help="write the model and scheduler state here at the end")
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    distributed = "RANK" in os.environ and "WORLD_SIZE" in os.environ  # started by torchrun
    if distributed:
        dist.init_process_group("gloo")  # env:// (RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT)
    rank, world = (dist.get_rank(), dist.get_world_size()) if distributed else (0, 1)
    master = rank == 0

    train_bytes, val_bytes, about = load_corpus()
    train, val = as_tensor(train_bytes), as_tensor(val_bytes)
    val_windows = fixed_windows(val, args.context, args.val_windows)
    train_windows = train.unfold(0, args.context + 1, 1)  # every window, as a view
    gen = torch.Generator().manual_seed(1000 * args.seed + rank)  # each rank its own windows

    torch.manual_seed(args.seed)  # the same initial model on every rank
    model = GPT(args.layers, args.width, args.heads, args.context, args.temperature)
    net = nn.parallel.DistributedDataParallel(model) if distributed else model
    opt = torch.optim.AdamW(param_groups(model, args.weight_decay), lr=args.max_lr, betas=(0.9, 0.95))
    warmup = args.warmup_steps if args.warmup_steps >= 0 else args.steps // 10
    decay = args.decay_steps if args.decay_steps >= 0 else args.steps // 5
    sched = None  # cosine: the loop sets each group's rate itself
    if args.schedule == "onecycle":
        # cycle_momentum=False keeps AdamW's betas as written (OneCycleLR would cycle beta1).
        sched = OneCycleLR(opt, max_lr=args.max_lr, total_steps=args.steps, cycle_momentum=False)
    elif args.schedule == "wsd":
        sched = LambdaLR(opt, lambda step: wsd_factor(step, warmup, decay, args.steps))
    baseline, params = unigram_bpb(train, val), sum(p.numel() for p in model.parameters())
    if master:
        print(about, flush=True)
        print("unigram val_bpb %.4f; model: %d layers, width %d, %d heads, context %d, %d parameters; "
              "%d ranks x batch %d, %d steps, max_lr %g (%s), temperature %g, seed %d"
              % (baseline, args.layers, args.width, args.heads, args.context, params, world,
                 args.batch_size, args.steps, args.max_lr, args.schedule, args.temperature, args.seed), flush=True)

    t0 = time.time()
    for step in range(args.steps):
        if sched is None:
            for g in opt.param_groups:
                g["lr"] = cosine_lr(step, args.max_lr, warmup, args.steps)
        if args.eval_every and step % args.eval_every == 0 and master:
            print("step %d: val_bpb %.4f, lr %.3g" % (step, evaluate(model, val_windows), opt.param_groups[0]["lr"]),
                  flush=True)
        batch = train_windows[torch.randint(len(train_windows), (args.batch_size,), generator=gen)].long()
        loss = lm_loss(net(batch[:, :-1]), batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        if sched is not None:
            sched.step()
    seconds = time.time() - t0

    if master:
        val_bpb = evaluate(model, val_windows)
        result = {"steps": args.steps, "seconds": round(seconds, 2), "train_loss": round(loss.item(), 4),
                  "val_bpb": round(val_bpb, 4), "unigram_bpb": round(baseline, 4), "params": params,
                  "max_lr": args.max_lr, "schedule": args.schedule, "seed": args.seed, "ranks": world}
        print(json.dumps(result), flush=True)
        print("final val_bpb %.4f" % val_bpb, flush=True)
        if args.save:
            torch.save({"model": model.state_dict(), "scheduler": sched.state_dict() if sched else None}, args.save)
    if distributed:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
