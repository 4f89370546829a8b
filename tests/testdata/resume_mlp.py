"""A training loop that resumes at the step under hdet (issue 50,
docs/pytorch.md#resume), for the end-to-end tests of stopping and
relaunching a worker run. Deterministic to the bit on CPU.

A regression MLP with dropout, AdamW and CosineAnnealingLR (built before
the attach line, since it is in state=), batches from torch's global
generator (hdet offsets its seed on ranks > 0 and restores it on a relaunch),
a train state that counts steps and examples before each optimizer step.

--state all|empty|none: what attach gets (the model, scheduler and train
state; {}; no state=). --own-ckpt PATH: as the user script of issue 50,
save model, optimizer, scheduler and step every --ckpt-every steps on RANK 0
and load them at the start when the file exists (with --checkpoint-path
through hdet.checkpoint_path). Rank 0 prints the start step and, at the end,
the SHA-256 of its final parameters.
"""

import argparse
import hashlib
import os
import time

import hdet
import torch
import torch.nn.functional as F
from torch.optim import lr_scheduler

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, required=True, help="optimizer steps (total_steps)")
ap.add_argument("--window", type=int, default=5, help="attach's window")
ap.add_argument("--state", default="all", choices=["all", "empty", "none"])
ap.add_argument("--own-ckpt", help="the script's own checkpoint file (the issue's user script)")
ap.add_argument("--ckpt-every", type=int, default=50)
ap.add_argument("--checkpoint-path", action="store_true", help="keep the passes apart: hdet.checkpoint_path(--own-ckpt)")
ap.add_argument("--sleep", type=float, default=0, help="seconds per iteration")
args = ap.parse_args()


class TrainState:
    def __init__(self):
        self.step, self.examples = 0, 0

    def state_dict(self):
        return {"step": self.step, "examples": self.examples}

    def load_state_dict(self, d):
        self.step, self.examples = d["step"], d["examples"]


rank = int(os.environ.get("RANK", "0"))
torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
torch.manual_seed(7)
model = torch.nn.Sequential(torch.nn.Linear(16, 32), torch.nn.Tanh(), torch.nn.Dropout(0.1), torch.nn.Linear(32, 1))
opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=1e-3)
sched = lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps, eta_min=1e-4)
train = TrainState()
state = {"all": {"model": model, "sched": sched, "train": train}, "empty": {}, "none": None}[args.state]
own = args.own_ckpt and (hdet.checkpoint_path(args.own_ckpt) if args.checkpoint_path else args.own_ckpt)
start = 0
if own and os.path.exists(own):
    ckpt = torch.load(own)
    model.load_state_dict(ckpt["model"])
    opt.load_state_dict(ckpt["opt"])
    sched.load_state_dict(ckpt["sched"])
    start = ckpt["step"]
    print("resume_mlp.py: resumed from step %d" % start, flush=True)
opt = hdet.attach(opt, args.steps, window=args.window, state=state)
if state is not None:
    start = hdet.start_step()
if rank == 0:
    print("resume_mlp.py: start step %d" % start, flush=True)
w_true = torch.linspace(-1, 1, 16)
for step in range(start, args.steps):
    train.step += 1
    x = torch.randn(32, 16)
    train.examples += x.shape[0]
    loss = F.mse_loss(model(x), (x @ w_true).sin().unsqueeze(1))
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    sched.step()
    if own and rank == 0 and (step + 1) % args.ckpt_every == 0:
        torch.save({"model": model.state_dict(), "opt": opt.state_dict(), "sched": sched.state_dict(),
                    "step": step + 1}, own)
    if args.sleep:
        time.sleep(args.sleep)

if rank == 0:
    h = hashlib.sha256()
    for p in model.parameters():
        h.update(p.detach().contiguous().numpy().tobytes())
    print("resume_mlp.py: final parameters sha256 %s after %d steps (train state %d steps, %d examples)"
          % (h.hexdigest(), args.steps, train.step, train.examples), flush=True)
