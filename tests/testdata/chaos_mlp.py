"""The PyTorch workload of the chaos soak (tests/chaos_test.go,
TestMultiHostChaosPyTorch): a training loop written as users write them,
with hdet's one line, deterministic to the bit on CPU.

A tiny MLP regresses a fixed function of synthetic inputs with AdamW under a
LambdaLR schedule (linear warm-up over a tenth of the steps, then a cosine
set by hand to a tenth of the peak), one thread, fixed seeds,
torch.use_deterministic_algorithms(True). Each rank draws its own batches
from a generator seeded by its rank (hdet.rank()). At the end rank 0 prints
the SHA-256 of its final parameters (after hdet's last converge every rank
holds the same ones): the soak compares it with the uninterrupted run's.

It gives hdet its state (the scheduler and its batch generator; the
parameters and the optimizer are always saved), so a relaunch resumes at
hdet's last checkpoint and trains only what was left (docs/pytorch.md#resume).
The script writes no checkpoint of its own; it starts from its own file,
--init (its 577 parameters as little-endian float32, in
model.parameters() order, written by the soak before the first launch), as
a script resumes its own checkpoint, and the soak checks that no launch
changed it.
"""

import argparse
import hashlib
import math
import os

import hdet
import torch
import torch.nn.functional as F
from torch.optim import lr_scheduler

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, required=True, help="optimizer steps (total_steps)")
ap.add_argument("--window", type=int, default=5, help="attach's window")
ap.add_argument("--init", help="the parameters to start from: float32, little-endian, in model.parameters() order")
args = ap.parse_args()

torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
torch.manual_seed(7)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Linear(32, 1))
if args.init:
    with open(args.init, "rb") as f:
        flat = torch.frombuffer(bytearray(f.read()), dtype=torch.float32)
    if flat.numel() != sum(p.numel() for p in model.parameters()):
        raise SystemExit("chaos_mlp.py: %s holds %d floats, not the model's %d"
                         % (args.init, flat.numel(), sum(p.numel() for p in model.parameters())))
    with torch.no_grad():
        torch.nn.utils.vector_to_parameters(flat, model.parameters())

opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=1e-3)
warmup = max(1, args.steps // 10)


def rate(s):
    """Linear warm-up, then a cosine to a tenth of the peak."""
    if s < warmup:
        return (s + 1) / (warmup + 1)
    return 0.1 + 0.45 * (1 + math.cos(math.pi * (s - warmup) / max(1, args.steps - warmup)))


class Batches:
    """This rank's batch generator, as a Stateful object: hdet saves its
    position with the rest at a window end, so a relaunch draws the next
    batch, not the first one again."""

    def __init__(self, seed):
        self.gen = torch.Generator().manual_seed(seed)

    def state_dict(self):
        return {"gen": self.gen.get_state()}

    def load_state_dict(self, d):
        self.gen.set_state(d["gen"])


# The scheduler is built before the attach line because it is in state=.
sched = lr_scheduler.LambdaLR(opt, rate)
batches = Batches(1000 + hdet.rank())
# A search pass of a quarter of the run (auto.until), where the default's
# 16 windows would leave the soak's search-pass faults no room.
opt = hdet.attach(opt, args.steps, window=args.window, auto={"until": 0.25},
                  state={"sched": sched, "batches": batches})
w_true = torch.linspace(-1, 1, 16)
loss = torch.zeros(())
for it in range(hdet.start_step(), args.steps):
    x = torch.randn(32, 16, generator=batches.gen)
    y = (x @ w_true).sin().unsqueeze(1)
    loss = F.mse_loss(model(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    sched.step()

if int(os.environ.get("RANK", "0")) == 0:
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    print("chaos_mlp.py: final parameters sha256 %s after %d steps, last loss %.6f" % (h.hexdigest(), args.steps, loss.item()),
          flush=True)
