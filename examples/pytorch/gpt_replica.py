"""gpt_hdet.py's GPT trained as replicas of G ranks (issue 41's drift and quality measurements).

    mpirun -np 4 bin/hdet run --worker --set train.replica_size=2 -- \\
        .venv/bin/python examples/pytorch/gpt_replica.py [--fsdp] --window 10

With HDET_REPLICA_SIZE G > 1 (hdet's train.replica_size) the G ranks of a
replica train one model as torchrun's world would: DDP, or with --fsdp
FSDP2 (fully_shard on every block and the root). With G = 1 each rank trains
alone. --replica-batch windows per step are split over the replica's ranks,
so a replica takes the same step whatever G is, and every world rank
(HDET_RANK) draws its own windows, so no two replicas train on the same
data. The last line is `final val_bpb X` (the final model, every replica
holding the same), after a JSON line.
"""

import argparse
import json
import os

import hdet
import torch
import torch.distributed as dist
import torch.nn as nn
from gpt_hdet import GPT, as_tensor, evaluate, fixed_windows, lm_loss, load_corpus, param_groups
from torch.distributed.fsdp import fully_shard
from torch.optim.lr_scheduler import OneCycleLR


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--steps", type=int, default=300)
    ap.add_argument("--replica-batch", type=int, default=16, help="windows per replica and step")
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--layers", type=int, default=2)
    ap.add_argument("--width", type=int, default=64)
    ap.add_argument("--heads", type=int, default=4)
    ap.add_argument("--max-lr", type=float, default=3e-3)
    ap.add_argument("--weight-decay", type=float, default=0.1)
    ap.add_argument("--grad-clip", type=float, default=1.0)
    ap.add_argument("--window", type=int, default=None, help="hdet's window T (attach's window)")
    ap.add_argument("--fsdp", action="store_true", help="FSDP2 inside the replica instead of DDP")
    ap.add_argument("--val-windows", type=int, default=256)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()
    torch.set_num_threads(args.threads)

    g = int(os.environ.get("HDET_REPLICA_SIZE", "1"))
    world_rank = int(os.environ.get("HDET_RANK", "0"))
    if args.replica_batch % g:
        raise SystemExit("--replica-batch %d does not split over %d ranks" % (args.replica_batch, g))
    if g > 1:
        dist.init_process_group("gloo")  # the replica: RANK, WORLD_SIZE = G, MASTER_ADDR/PORT from hdet

    train_bytes, val_bytes, _ = load_corpus()
    train, val = as_tensor(train_bytes), as_tensor(val_bytes)
    val_windows = fixed_windows(val, args.context, args.val_windows)
    train_windows = train.unfold(0, args.context + 1, 1)
    gen = torch.Generator().manual_seed(1000 * args.seed + world_rank)  # every rank of every replica its own

    torch.manual_seed(args.seed)
    model = GPT(args.layers, args.width, args.heads, args.context)
    net = model
    if g > 1 and args.fsdp:
        for block in model.blocks:
            fully_shard(block)
        fully_shard(model)
    elif g > 1:
        net = nn.parallel.DistributedDataParallel(model)
    opt = torch.optim.AdamW(param_groups(model, args.weight_decay), lr=args.max_lr, betas=(0.9, 0.95))
    opt = hdet.attach(opt, args.steps, window=args.window)
    sched = OneCycleLR(opt, max_lr=args.max_lr, total_steps=args.steps, cycle_momentum=False)

    for _ in range(args.steps):
        batch = train_windows[torch.randint(len(train_windows), (args.replica_batch // g,), generator=gen)].long()
        loss = lm_loss(net(batch[:, :-1]), batch)
        opt.zero_grad(set_to_none=True)
        loss.backward()
        nn.utils.clip_grad_norm_(model.parameters(), args.grad_clip)
        opt.step()
        sched.step()

    val_bpb = evaluate(model, val_windows)  # FSDP2: every rank of the replica takes part
    if world_rank == 0:
        print(json.dumps({"steps": args.steps, "replica_size": g, "fsdp": args.fsdp and g > 1, "window": args.window,
                          "seed": args.seed, "train_loss": round(loss.item(), 4), "val_bpb": round(val_bpb, 4)}),
              flush=True)
        print("final val_bpb %.4f" % val_bpb, flush=True)
    if g > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    main()
