"""A small real PyTorch worker for the bridge tests: linear regression with
two named parameter groups, attached with hdet.attach (or hdet.OneCycleLR
with --onecycle)."""

import argparse
import json
import os
import signal
import sys
import time

import torch

import hdet

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=12)
ap.add_argument("--optimizer", default="sgd", choices=["sgd", "adamw"])
ap.add_argument("--die-at-step", type=int, default=-1)
ap.add_argument("--hang-at-step", type=int, default=-1)
ap.add_argument("--fail-at-step", type=int, default=-1)
ap.add_argument("--fail-after-stop", action="store_true", help="exit 3 once the run is over (after hdet's STOP)")
ap.add_argument("--abort-after-stop", action="store_true",
                help="abort() once the run is over, as a native crash in torch's teardown does")
ap.add_argument("--end-at-step", type=int, default=-1, help="leave the loop early")
ap.add_argument("--extra-step", action="store_true", help="step the optimizer once past total_steps")
ap.add_argument("--onecycle", action="store_true", help="hdet.OneCycleLR instead of hdet.attach")
ap.add_argument("--fail-rank", type=int, default=-1, help="only this rank fails, ends early, hangs or aborts")
ap.add_argument("--explore", default="lr,weight_decay,temperature", help="names, or a JSON list of names and dicts")
ap.add_argument("--window", type=int, help="attach's window")
ap.add_argument("--alpha", type=float, help="attach's alpha")
ap.add_argument("--spread", help="attach's spread")
ap.add_argument("--auto", type=json.loads, help="attach's auto, as JSON")
ap.add_argument("--sleep", type=float, default=0, help="seconds per step")
ap.add_argument("--ddp", action="store_true", help="set up torch.distributed (gradients mode)")
ap.add_argument("--probe", action="store_true", help="give hdet a probe function")
ap.add_argument("--cuda", action="store_true",
                help="train on cuda:LOCAL_RANK as torchrun scripts do (modulo the GPUs it sees: shared GPUs)")
args = ap.parse_args()
if args.fail_rank >= 0 and args.fail_rank != hdet.rank():
    args.die_at_step = args.hang_at_step = args.fail_at_step = args.end_at_step = -1
    args.fail_after_stop = args.abort_after_stop = False

torch.manual_seed(0)
dev = torch.device("cpu")
if args.cuda:
    dev = torch.device("cuda", int(os.environ["LOCAL_RANK"]) % torch.cuda.device_count())
    torch.cuda.set_device(dev)
model = torch.nn.Sequential(torch.nn.Linear(8, 4), torch.nn.ReLU(), torch.nn.Linear(4, 1)).to(dev)
groups = [
    {"name": "body", "params": model[0].parameters(), "weight_decay": 1e-3},
    {"name": "head", "params": model[2].parameters(), "weight_decay": 0.0},
]
if args.optimizer == "adamw":
    opt = torch.optim.AdamW(groups, lr=0.05)
else:
    opt = torch.optim.SGD(groups, lr=0.05, momentum=0.9)
if args.ddp:
    # MASTER_ADDR/PORT, RANK, WORLD_SIZE from hdet; NCCL needs a GPU a rank
    nccl = args.cuda and torch.cuda.device_count() >= int(os.environ["LOCAL_WORLD_SIZE"])
    torch.distributed.init_process_group("nccl" if nccl else "gloo")
    print("worker.py: rank %s on %s, backend %s" % (os.environ["RANK"], dev, torch.distributed.get_backend()),
          flush=True)
    model = torch.nn.parallel.DistributedDataParallel(model)

temperature = [1.0]


def evaluate():
    """(sum of the parameters, sum of the optimizer's state tensors): lets the
    tests see what the worker loaded."""
    with torch.no_grad():
        state = sum(float(t.sum()) for st in opt.state.values() for t in st.values() if torch.is_tensor(t))
        return float(sum(p.sum() for p in model.parameters())), state


probe_x = torch.randn(64, 8, generator=torch.Generator().manual_seed(99)).to(dev)
if args.probe:
    hdet.probe(lambda: float((model(probe_x) ** 2).mean()))
hdet_args = dict(callbacks={"temperature": lambda v: temperature.__setitem__(0, v)},
                 explore=json.loads(args.explore) if args.explore.startswith("[") else args.explore.split(","),
                 evaluate=evaluate)
sched = None
if args.onecycle:
    sched = hdet.OneCycleLR(opt, max_lr=[0.05, 0.05], total_steps=args.steps, hdet_window=args.window,
                            hdet_alpha=args.alpha, hdet_spread=args.spread, hdet_auto=args.auto, **hdet_args)
else:
    hdet.attach(opt, args.steps, window=args.window, alpha=args.alpha, spread=args.spread, auto=args.auto,
                **hdet_args)
gen = torch.Generator().manual_seed(1 + hdet.rank())
w_true = torch.arange(8, dtype=torch.float32, device=dev) / 8
for step in range(args.steps):
    if step == args.die_at_step:
        os.kill(os.getpid(), signal.SIGKILL)
    if step == args.hang_at_step:
        time.sleep(3600)
    time.sleep(args.sleep)
    if step == args.end_at_step:
        break
    if step == args.fail_at_step:
        raise RuntimeError("worker.py failing on purpose at step %d" % step)
    x = torch.randn(32, 8, generator=gen).to(dev)
    y = (x @ w_true).unsqueeze(1)
    loss = torch.nn.functional.mse_loss(model(x) / temperature[0], y)
    opt.zero_grad()
    loss.backward()
    opt.step()
    if sched is not None:
        sched.step()
print("worker.py finished %d steps, lr %r" % (args.steps, [g["lr"] for g in opt.param_groups]), flush=True)
if args.extra_step:
    opt.step()
if args.fail_after_stop:
    sys.exit(3)
if args.abort_after_stop:
    os.abort()
