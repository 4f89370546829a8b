"""A training loop written as users write them, with hdet's one line, for the
end-to-end tests of hdet.attach (tests/attach_test.go).

A small regression MLP whose learning rate comes from one of the schedules
people use (LambdaLR warm-up-stable-decay, CosineAnnealingLR, SequentialLR
of LinearLR and CosineAnnealingLR, torch's OneCycleLR, a nanoGPT-style
`g["lr"] = ...` loop, a constant), with AdamW, Adam or SGD in their default,
foreach or fused implementation, one or two param groups, gradient
accumulation, an AMP GradScaler that skips a step, torch.compile or DDP.

With --record DIR the script registers its own step pre-hook on its
optimizer and writes DIR/lr-rankR-PASS.jsonl (PASS: search, or main when
HDET_PASS=main), a line for every optimizer step call: the rates the script
had set before the call ("script"), the rates each param group held inside
the step ("inside") and whether AMP's GradScaler skipped it ("skipped").
"""

import argparse
import json
import math
import os
import time

import hdet
import torch
import torch.nn.functional as F
from torch.optim import lr_scheduler

ap = argparse.ArgumentParser()
ap.add_argument("--steps", type=int, default=40, help="optimizer steps (total_steps)")
ap.add_argument("--schedule", default="constant",
                choices=["lambda-wsd", "cosine", "sequential", "onecycle", "manual", "constant"])
ap.add_argument("--optimizer", default="adamw", choices=["adamw", "adam", "sgd"])
ap.add_argument("--impl", default="default", choices=["default", "foreach", "fused"])
ap.add_argument("--groups", type=int, default=1, choices=[1, 2], help="param groups (2: body and head, own rates)")
ap.add_argument("--per-group", action="store_true", help="explore one multiplier per group (lr/body, lr/head)")
ap.add_argument("--accum", type=int, default=1, help="micro-batches per optimizer step")
ap.add_argument("--amp-skip", type=int, default=-1,
                help="AMP GradScaler (CPU); the gradient of this iteration is made inf, so the scaler skips it")
ap.add_argument("--compile", action="store_true", help="torch.compile the model")
ap.add_argument("--compile-backend", default="aot_eager", help="torch.compile's backend")
ap.add_argument("--ddp", action="store_true", help="DistributedDataParallel (gloo)")
ap.add_argument("--window", type=int, help="attach's window")
ap.add_argument("--same-data", action="store_true", help="every rank draws the same batches")
ap.add_argument("--record", help="folder for the rates read inside each step")
ap.add_argument("--no-attach", action="store_true", help="leave hdet.attach out")
ap.add_argument("--total-steps", default="", help="RANK=N[,RANK=N]: that rank gives attach N as total_steps")
ap.add_argument("--extra-steps", type=int, default=0, help="optimizer steps after the loop's")
ap.add_argument("--sleep", type=float, default=0, help="seconds per iteration")
args = ap.parse_args()
if args.amp_skip >= 0 and (args.optimizer, args.impl) != ("adamw", "fused"):
    ap.error("--amp-skip needs --optimizer adamw --impl fused (the scaler calls a fused step, which skips)")

rank = int(os.environ.get("RANK", "0"))
torch.set_num_threads(1)
torch.manual_seed(0)  # the same initial model on every rank
model = torch.nn.Sequential(torch.nn.Linear(8, 16), torch.nn.Tanh(), torch.nn.Linear(16, 1))
if args.ddp:
    torch.distributed.init_process_group("gloo")  # RANK, WORLD_SIZE, MASTER_ADDR, MASTER_PORT
net = torch.nn.parallel.DistributedDataParallel(model) if args.ddp else model
if args.compile:
    net = torch.compile(net, backend=args.compile_backend)

LR = 0.05 if args.optimizer == "sgd" else 0.01
if args.groups == 1:
    groups = [{"params": model.parameters()}]
else:
    groups = [{"name": "body", "params": model[0].parameters(), "lr": LR, "weight_decay": 1e-3},
              {"name": "head", "params": model[2].parameters(), "lr": LR / 3, "weight_decay": 0.0}]
impl = {"default": {}, "foreach": {"foreach": True}, "fused": {"fused": True}}[args.impl]
if args.optimizer == "adamw":
    opt = torch.optim.AdamW(groups, lr=LR, **impl)
elif args.optimizer == "adam":
    opt = torch.optim.Adam(groups, lr=LR, **impl)
else:
    opt = torch.optim.SGD(groups, lr=LR, momentum=0.9, **impl)

total = dict((int(k), int(v)) for k, v in (kv.split("=") for kv in args.total_steps.split(",") if kv))
if not args.no_attach:
    explore = ["lr/body", "lr/head"] if args.per_group else ["lr"]
    opt = hdet.attach(opt, total.get(rank, args.steps), window=args.window, explore=explore)

# A step AMP skips is not one of total_steps: the loop then runs one more.
iters = args.steps + (args.amp_skip >= 0)
peaks = [g["lr"] for g in opt.param_groups]
warmup = max(1, iters // 10)
sched = None
if args.schedule == "lambda-wsd":
    decay = iters // 5
    sched = lr_scheduler.LambdaLR(opt, lambda s: (s + 1) / (warmup + 1) if s < warmup
                                  else min(1.0, (iters - s) / (decay + 1)))
elif args.schedule == "cosine":
    sched = lr_scheduler.CosineAnnealingLR(opt, T_max=iters, eta_min=LR / 20)
elif args.schedule == "sequential":
    sched = lr_scheduler.SequentialLR(opt, [lr_scheduler.LinearLR(opt, start_factor=0.1, total_iters=warmup),
                                            lr_scheduler.CosineAnnealingLR(opt, T_max=iters - warmup)],
                                      milestones=[warmup])
elif args.schedule == "onecycle":
    sched = lr_scheduler.OneCycleLR(opt, max_lr=peaks, total_steps=iters)


def get_lr(it, peak):
    """nanoGPT's: linear warm-up, then cosine decay to a tenth."""
    if it < warmup:
        return peak * (it + 1) / (warmup + 1)
    ratio = (it - warmup) / max(1, iters - 1 - warmup)
    return peak / 10 + 0.5 * (1 + math.cos(math.pi * ratio)) * (peak - peak / 10)


script_lrs = []  # the rates the script set before the current step call
if args.record:
    # One line per step call, written inside the step: hdet ends the search
    # pass's process with SIGKILL.
    record = open(os.path.join(args.record, "lr-rank%d-%s.jsonl" % (rank, os.environ.get("HDET_PASS", "search"))), "w")

    def record_inside(optimizer, a, kw):
        found = getattr(optimizer, "found_inf", None)  # set by GradScaler around a fused step
        record.write(json.dumps({"script": script_lrs, "inside": [float(g["lr"]) for g in optimizer.param_groups],
                                 "skipped": bool(torch.is_tensor(found) and found.item() != 0)}) + "\n")
        record.flush()

    opt.register_step_pre_hook(record_inside)


scaler = torch.amp.GradScaler("cpu") if args.amp_skip >= 0 else None
gen = torch.Generator().manual_seed(1 if args.same_data else 1 + rank)
w_true = torch.linspace(-1, 1, 8)


def step_once(it):
    if args.schedule == "manual":
        for g, peak in zip(opt.param_groups, peaks):
            g["lr"] = get_lr(it, peak)
    for _ in range(args.accum):
        x = torch.randn(32, 8, generator=gen)
        y = (x @ w_true).tanh().unsqueeze(1)
        loss = F.mse_loss(net(x), y) / args.accum
        (scaler.scale(loss) if scaler else loss).backward()
    if it == args.amp_skip:
        model[0].weight.grad[0, 0] = float("inf")
    script_lrs[:] = [float(g["lr"]) for g in opt.param_groups]
    if scaler:
        scaler.step(opt)
        scaler.update()
    else:
        opt.step()
    opt.zero_grad(set_to_none=True)
    if sched is not None:
        sched.step()
    return loss.item() * args.accum


t0 = time.time()
for it in range(iters):
    time.sleep(args.sleep)
    loss = step_once(it)
if rank == 0:
    print("attach_loop.py: %d iterations, last loss %.5f, %.1f s" % (iters, loss, time.time() - t0), flush=True)
for _ in range(args.extra_steps):
    step_once(iters - 1)
if args.ddp:
    torch.distributed.destroy_process_group()
