"""examples/pytorch/gpt.py's byte-level GPT under a warm-up + cosine schedule, plain or with one of hdet's peers (issue 39).

    .venv/bin/python bench/peers/gpt_peer.py --max-lr 1e-2 --seed 4                       # (a) plain
    .venv/bin/python bench/peers/gpt_peer.py --peer lrfind|prodigy|dadapt --seed 4
    .venv/bin/python bench/peers/gpt_peer.py --peer schedulefree --max-lr 1e-2 --seed 4
    mpirun -np 4 bin/hdet run --run-dir DIR --progress none --worker -- \\
        .venv/bin/python bench/peers/gpt_peer.py --hdet [--probe] --max-lr 1e-2 --seed 4

The model, corpus, loss and evaluation are gpt.py's own (imported: the
Python standard library's sources, validation bits per byte on 256 fixed
windows); AdamW betas 0.9/0.95 with gpt.py's two groups (weight decay 0.1 on
matrices), gradient clipping at 1, one process (no DDP: --hdet runs hdet's
local mode, each rank its own batches by hdet.rank()). The schedule is
gpt.py's `--schedule cosine` (gpt.cosine_lr, nanoGPT's, set by hand every
step): a linear warm-up over 10 % of the steps to --max-lr, then a cosine
decay to max_lr / 10. Defaults: 1000 steps of a 2-layer, width-64 model,
batch 16 windows of 64 bytes.

Peers (their own code from PyPI): lrfind: torch-lr-finder's range test
(exponential 1e-7 .. 10, 100 steps) on the same model and optimizer, its
steepest-descent suggestion, then plain training at it; prodigy:
prodigyopt.Prodigy lr 1.0 (decoupled weight decay as the groups say,
safeguard_warmup=True under the warm-up) with the same schedule shape at 1;
schedulefree: AdamWScheduleFree at --max-lr (betas 0.9/0.95), its warm-up
over the same 10 %, no schedule, train()/eval() switched; dadapt:
DAdaptAdam lr 1.0 (decouple=True) with the same shape at 1. --hdet adds
hdet.attach; --probe hdet.probe_dataset on 256 fixed training windows;
--same-ranks attaches with alpha=0 and the search off (the same ranks).
The last line is a JSON object with "val_bpb".
"""

import argparse
import json
import math
import os
import sys
import time

import torch
import torch.nn as nn

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "examples", "pytorch"))
import gpt  # (examples/pytorch/gpt.py: model, corpus, loss, evaluation)
import lrfind  # (bench/peers/lrfind.py: the range test both peers run)


def range_test(model, opt, train_windows, batch, seed):
    g = torch.Generator().manual_seed(10_000 + seed)
    w = train_windows[torch.randint(len(train_windows), (100 * batch,), generator=g)].long()
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(w[:, :-1], w[:, 1:]), batch_size=batch)

    def criterion(logits, targets):
        return nn.functional.cross_entropy(logits.reshape(-1, gpt.VOCAB), targets.reshape(-1))

    return lrfind.suggest(model, opt, criterion, loader)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer", default="plain", choices=["plain", "lrfind", "prodigy", "schedulefree", "dadapt"])
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--max-lr", type=float, default=3e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--val-windows", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    ap.add_argument("--hdet", action="store_true")
    ap.add_argument("--probe", action="store_true")
    ap.add_argument("--same-ranks", action="store_true", help="with --hdet: spread 0, no search (the same ranks)")
    args = ap.parse_args()
    if (args.hdet or args.probe or args.same_ranks) and args.peer != "plain":
        ap.error("--hdet, --probe and --same-ranks go with --peer plain")
    if args.same_ranks and (args.probe or not args.hdet):
        ap.error("--same-ranks goes with --hdet and without --probe")
    torch.set_num_threads(args.threads)

    train_bytes, val_bytes, _ = gpt.load_corpus()
    train, val = gpt.as_tensor(train_bytes), gpt.as_tensor(val_bytes)
    val_windows = gpt.fixed_windows(val, args.context, args.val_windows)
    train_windows = train.unfold(0, args.context + 1, 1)
    torch.manual_seed(args.seed)
    model = gpt.GPT(args.layers, args.width, args.heads, args.context)
    groups = gpt.param_groups(model, args.weight_decay)
    warmup = args.steps // 10
    lr, extra, shaped = args.max_lr, 0, True
    if args.peer == "lrfind":
        lr, extra = range_test(model, torch.optim.AdamW(gpt.param_groups(model, args.weight_decay), lr=1e-7,
                                                        betas=(0.9, 0.95)), train_windows, args.batch_size, args.seed)
        if lr is None:
            raise SystemExit("torch-lr-finder gave no suggestion")
    if args.peer in ("plain", "lrfind"):
        opt = torch.optim.AdamW(groups, lr=lr, betas=(0.9, 0.95))
    elif args.peer == "prodigy":
        from prodigyopt import Prodigy
        lr = 1.0
        opt = Prodigy(groups, lr=lr, betas=(0.9, 0.95), safeguard_warmup=True)
    elif args.peer == "dadapt":
        import dadaptation
        lr = 1.0
        opt = dadaptation.DAdaptAdam(groups, lr=lr, betas=(0.9, 0.95), decouple=True)
    else:
        import schedulefree
        shaped = False
        opt = schedulefree.AdamWScheduleFree(groups, lr=lr, betas=(0.9, 0.95), warmup_steps=warmup)
    rank = 0
    if args.hdet:
        import hdet
        if args.probe:
            w = gpt.fixed_windows(train, args.context, 256, offset=0.5)
            hdet.probe_dataset(model, torch.utils.data.TensorDataset(w[:, :-1], w[:, 1:]), examples=256)
        same = dict(alpha=0, auto={"enabled": False}) if args.same_ranks else {}
        opt = hdet.attach(opt, total_steps=args.steps, **same)
        rank = hdet.rank() if hdet.under_hdet() else 0
    gen = torch.Generator().manual_seed(1000 * args.seed + rank)  # each replica its own windows

    model.train()
    if not shaped:
        opt.train()
    t0 = time.time()
    for step in range(args.steps):
        if shaped:
            for g in opt.param_groups:
                g["lr"] = gpt.cosine_lr(step, lr, warmup, args.steps)
        batch = train_windows[torch.randint(len(train_windows), (args.batch_size,), generator=gen)].long()
        loss = gpt.lm_loss(model(batch[:, :-1]), batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
    seconds = time.time() - t0
    if not shaped:
        opt.eval()
    if rank == 0:
        val_bpb = gpt.evaluate(model, val_windows)
        used = lr * opt.param_groups[0]["d"] if args.peer in ("prodigy", "dadapt") else lr
        print(json.dumps({"peer": args.peer, "hdet": args.hdet, "probe": args.probe, "seed": args.seed,
                          "max_lr": args.max_lr, "lr_used": used, "steps": args.steps, "extra_steps": extra,
                          "seconds": round(seconds, 2), "train_loss": round(loss.item(), 4),
                          "val_bpb": val_bpb if math.isfinite(val_bpb) else float("nan")}), flush=True)


if __name__ == "__main__":
    main()
