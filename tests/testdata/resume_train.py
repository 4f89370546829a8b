"""A training loop that gives hdet its state, for the end-to-end tests of a
worker run resumed at the step (tests/worker_resume_test.go).

A small regression MLP with dropout, AdamW, a CosineAnnealingLR, local mode
or DDP (--ddp). The data order is the pattern
docs/pytorch.md#resume gives for a sampler: each epoch's order comes from a
seed and the epoch, and the loop starts at hdet.start_step(), so a resumed
run draws the batches the stopped one would have.

STOP_AT=PASS:STEP in the environment (search or main) makes HDET_RANK 0 send
SIGUSR1 to its hdet at that step, as a time limit would: hdet checkpoints at
the window's end and exits 3. The test sets it for the first launch only, so
the relaunch is the same command. With --record DIR every rank appends a
line per optimizer step to DIR/steps-rankR.jsonl (its pid, pass and step).
NO_STATE=1 leaves attach's state= out: a script hdet cannot resume.
"""

import argparse
import json
import os
import signal
import time

import hdet
import torch
import torch.nn.functional as F

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=160, help="optimizer steps (total_steps)")
ap.add_argument("--window", type=int, default=8, help="attach's window")
ap.add_argument("--ddp", action="store_true", help="DistributedDataParallel (gloo)")
ap.add_argument("--record", help="folder for the steps each process ran")
args = ap.parse_args()

hrank = int(os.environ.get("HDET_RANK", "0"))
rank, world = int(os.environ.get("RANK", "0")), int(os.environ.get("WORLD_SIZE", "1"))
pass_ = os.environ.get("HDET_PASS", "search")
torch.set_num_threads(1)
torch.use_deterministic_algorithms(True)
torch.manual_seed(0)  # the same initial model on every rank
model = torch.nn.Sequential(torch.nn.Linear(8, 32), torch.nn.Tanh(), torch.nn.Dropout(0.1), torch.nn.Linear(32, 1))
if args.ddp:
    torch.distributed.init_process_group("gloo")  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
# One parameter a gradient bucket: DDP rebuilds its buckets after a
# process's first step, so on more than 2 ranks a relaunch's first step sums
# the gradients in another order than the run left alone did (last-bit
# differences, as a torchrun relaunch has); one parameter a bucket keeps the
# order (docs/pytorch.md#resume).
net = torch.nn.parallel.DistributedDataParallel(model, bucket_cap_mb=1e-6) if args.ddp else model
opt = torch.optim.AdamW(model.parameters(), lr=0.01, weight_decay=1e-2)
sched = torch.optim.lr_scheduler.CosineAnnealingLR(opt, T_max=args.steps, eta_min=1e-4)
state = None if os.environ.get("NO_STATE") else {"model": model, "sched": sched}
opt = hdet.attach(opt, args.steps, window=args.window, explore=["lr"], state=state)

# This rank's shard of a fixed data set; each epoch in an order drawn from
# the epoch (a sampler's set_epoch), batch by batch.
data = torch.Generator().manual_seed(1234)
X = torch.randn(1024, 8, generator=data)
Y = (X @ torch.linspace(-1, 1, 8)).tanh().unsqueeze(1) + 0.05 * torch.randn(1024, 1, generator=data)
X, Y = X[rank::world], Y[rank::world]
BATCH = 16
per_epoch = len(X) // BATCH


def batch(step):
    epoch, i = divmod(step, per_epoch)
    order = torch.randperm(len(X), generator=torch.Generator().manual_seed(1000 + epoch))
    idx = order[i * BATCH:(i + 1) * BATCH]
    return X[idx], Y[idx]


stop_pass, _, stop_step = os.environ.get("STOP_AT", "").partition(":")
step = hdet.start_step()
if args.record:
    record = open(os.path.join(args.record, f"steps-rank{hrank}.jsonl"), "a")  # noqa: SIM115 (open for the run)

    def recorded(*_):
        """A step trained: after its update, inside the step call, which hdet
        holds at a window's end until the next window (or ends the process)."""
        record.write(json.dumps({"pid": os.getpid(), "pass": pass_, "step": step}) + "\n")
        record.flush()

    opt.register_step_post_hook(recorded)
for step in range(hdet.start_step(), args.steps):
    if hrank == 0 and pass_ == stop_pass and step == int(stop_step):
        os.kill(os.getppid(), signal.SIGUSR1)  # hdet, as mpirun forwards a time limit's signal
        time.sleep(0.5)  # a time limit's signal comes mid-step, not 1 ms before the window's end
    x, y = batch(step)
    loss = F.mse_loss(net(x), y)
    loss.backward()
    opt.step()
    opt.zero_grad(set_to_none=True)
    sched.step()
if args.ddp:
    torch.distributed.destroy_process_group()
