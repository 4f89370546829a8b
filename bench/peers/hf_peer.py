"""examples/pytorch/hf_finetune.py's Trainer run, plain or with one of hdet's peers (issue 39).

    .venv/bin/python bench/peers/hf_peer.py --max-lr 3e-3 --seed 4                        # (a) plain
    .venv/bin/python bench/peers/hf_peer.py --peer lrfind|prodigy|dadapt --seed 4
    .venv/bin/python bench/peers/hf_peer.py --peer schedulefree --max-lr 3e-3 --seed 4
    mpirun -np 4 bin/hdet run --run-dir DIR --progress none --worker -- \\
        .venv/bin/python bench/peers/hf_peer.py --hdet [--probe] --max-lr 3e-3 --seed 4

The example's model and data (imported: GPT-2 built from a config, 2
layers, width 64, on the Python standard library's sources, batch 16
windows of 64 bytes) under the Hugging Face Trainer's own AdamW
(weight decay 0.1, gradient clipping at 1) and its cosine schedule with a
linear warm-up over 10 % of --steps (1000), one process, no checkpoints,
no evaluation during training. The evaluation set splits in two: the
Trainer's eval_dataset (512 windows; hdet's probe draws its items from it)
and the 512 windows of the score, which nothing trains or chooses on. The
last line is a JSON object with "test_loss" (cross-entropy per byte on
the score's windows).

Peers (their own code from PyPI, through the Trainer where it has them):
lrfind: torch-lr-finder's range test (exponential 1e-7 .. 10, 100 steps)
on the same model and an AdamW with the Trainer's groups, its steepest-
descent suggestion, then the Trainer at it; prodigy: prodigyopt.Prodigy lr
1.0 (weight decay 0.1 on the Trainer's groups, safeguard_warmup=True) under
the Trainer's same schedule at 1; schedulefree: the Trainer's
optim="schedule_free_adamw" (schedulefree.AdamWScheduleFree, its warm-up
over the same steps, a constant schedule; the Trainer switches its
train()/eval()); dadapt: dadaptation.DAdaptAdam lr 1.0 (decouple=True) as
Prodigy. --hdet adds callbacks=[HdetCallback(...)]: with --probe the
callback's default (256 items of eval_dataset), without it
probe_examples=0 (hdet compares the replicas by their training losses, as
for a Trainer without an eval set); --same-ranks adds it with alpha=0 and
the search off (the same ranks).
"""

import argparse
import json
import os
import sys
import tempfile

import torch
import torch.nn as nn
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments, set_seed

sys.path.insert(0, os.path.join(os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__)))),
                                "examples", "pytorch"))
import hf_finetune  # (examples/pytorch/hf_finetune.py: corpus and windows)
import lrfind  # (bench/peers/lrfind.py: the range test both peers run)

CONTEXT, BATCH, WEIGHT_DECAY = 64, 16, 0.1


def groups(model):
    """The Trainer's parameter groups: weight decay on all but biases and LayerNorm weights."""
    decay = set(Trainer.get_decay_parameter_names(None, model))  # (uses no Trainer state)
    named = list(model.named_parameters())
    return [{"params": [p for n, p in named if n in decay], "weight_decay": WEIGHT_DECAY},
            {"params": [p for n, p in named if n not in decay], "weight_decay": 0.0}]


class Logits(nn.Module):
    """The model as torch-lr-finder calls it: input ids in, logits out."""

    def __init__(self, model):
        super().__init__()
        self.model = model

    def forward(self, ids):
        return self.model(input_ids=ids).logits


def range_test(model, train, seed):
    g = torch.Generator().manual_seed(10_000 + seed)
    idx = torch.randint(len(train), (100 * BATCH,), generator=g)
    w = train.windows[idx]
    loader = torch.utils.data.DataLoader(torch.utils.data.TensorDataset(w, w), batch_size=BATCH)

    def criterion(logits, ids):  # the model's own loss: predict each next byte
        return nn.functional.cross_entropy(logits[:, :-1].reshape(-1, logits.size(-1)), ids[:, 1:].reshape(-1))

    opt = torch.optim.AdamW(groups(model), lr=1e-7)
    return lrfind.suggest(Logits(model), opt, criterion, loader)


def peer_optimizer(peer, model):
    if peer == "prodigy":
        from prodigyopt import Prodigy
        return Prodigy(groups(model), lr=1.0, weight_decay=WEIGHT_DECAY, safeguard_warmup=True)
    import dadaptation
    return dadaptation.DAdaptAdam(groups(model), lr=1.0, weight_decay=WEIGHT_DECAY, decouple=True)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--peer", default="plain", choices=["plain", "lrfind", "prodigy", "schedulefree", "dadapt"])
    ap.add_argument("--max-lr", type=float, default=1e-3)
    ap.add_argument("--steps", type=int, default=1000)
    ap.add_argument("--corpus-bytes", type=int, default=4_000_000)
    ap.add_argument("--seed", type=int, default=1)
    ap.add_argument("--threads", type=int, default=1)
    ap.add_argument("--hdet", action="store_true", help="add HdetCallback (the plain peer only)")
    ap.add_argument("--probe", action="store_true", help="with the callback's probe on eval_dataset")
    ap.add_argument("--same-ranks", action="store_true", help="with --hdet: spread 0, no search (the same ranks)")
    args = ap.parse_args()
    if (args.hdet or args.probe or args.same_ranks) and args.peer != "plain":
        ap.error("--hdet, --probe and --same-ranks go with --peer plain")
    if args.same_ranks and (args.probe or not args.hdet):
        ap.error("--same-ranks goes with --hdet and without --probe")
    torch.set_num_threads(args.threads)

    set_seed(args.seed)
    train_text, val_text = hf_finetune.load_text(args.corpus_bytes)
    train = hf_finetune.Windows(train_text, CONTEXT, len(train_text) // CONTEXT)
    val = hf_finetune.Windows(val_text, CONTEXT, 1024)
    evalset = torch.utils.data.Subset(val, range(0, len(val), 2))
    score = val.windows[1::2]
    model = GPT2LMHeadModel(GPT2Config(vocab_size=256, n_positions=CONTEXT, n_embd=64, n_layer=2, n_head=4,
                                       bos_token_id=0, eos_token_id=0))
    lr, extra, optimizers, optim = args.max_lr, 0, (None, None), {}
    if args.peer == "lrfind":
        lr, extra = range_test(model, train, args.seed)
        if lr is None:
            raise SystemExit("torch-lr-finder gave no suggestion")
    elif args.peer in ("prodigy", "dadapt"):
        lr, optimizers = 1.0, (peer_optimizer(args.peer, model), None)
    elif args.peer == "schedulefree":
        optim = {"optim": "schedule_free_adamw", "lr_scheduler_type": "constant"}
    callbacks = []
    if args.hdet:
        from hdet.integrations.transformers import HdetCallback
        same = dict(alpha=0, auto={"enabled": False}) if args.same_ranks else {}
        callbacks = [HdetCallback(probe_examples=256 if args.probe else 0, **same)]
    with tempfile.TemporaryDirectory(prefix="hf-peer-") as out:
        test_loss = train_and_score(args, out, lr, optim, model, train, evalset, score, optimizers, callbacks)
    used = lr
    if args.peer in ("prodigy", "dadapt"):  # the adapted step size d times the peak lr
        used = optimizers[0].param_groups[0]["d"] * lr
    print(json.dumps({"peer": args.peer, "hdet": args.hdet, "probe": args.probe, "seed": args.seed,
                      "max_lr": args.max_lr, "lr_used": used, "steps": args.steps, "extra_steps": extra,
                      "test_loss": test_loss}), flush=True)


def train_and_score(args, out, lr, optim, model, train, evalset, score, optimizers, callbacks):
    """The Trainer's run; the loss per byte on the score's windows."""
    targs = dict(output_dir=out, max_steps=args.steps, per_device_train_batch_size=BATCH,
                 per_device_eval_batch_size=64, learning_rate=lr, lr_scheduler_type="cosine",
                 warmup_steps=args.steps // 10, weight_decay=WEIGHT_DECAY, max_grad_norm=1.0,
                 logging_steps=args.steps, eval_strategy="no", save_strategy="no", report_to="none",
                 seed=args.seed, disable_tqdm=True)
    targs.update(optim)
    trainer = Trainer(model=model, args=TrainingArguments(**targs), train_dataset=train, eval_dataset=evalset,
                      optimizers=optimizers, callbacks=callbacks)
    trainer.train()
    opt = trainer.optimizer
    if hasattr(opt, "eval"):  # Schedule-Free's averaged weights for the score
        opt.eval()
    model.eval()
    with torch.no_grad():
        return torch.stack([model(input_ids=b, labels=b).loss for b in score.split(64)]).mean().item()


if __name__ == "__main__":
    main()
