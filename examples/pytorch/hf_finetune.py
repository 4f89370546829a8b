"""Train a small byte-level GPT-2 with the Hugging Face Trainer on local text (an ordinary Trainer script).

    python examples/pytorch/hf_finetune.py
    mpirun -np 4 bin/hdet run --worker -- .venv/bin/python examples/pytorch/hf_finetune.py

The hdet change is one import and callbacks=[HdetCallback(probe_dataset=val)]:
under hdet each rank's Trainer trains one replica at its own multiple of the
rate the Trainer's scheduler sets, and hdet compares the replicas on 256
fixed items of the evaluation set (HF's callback events do not hand a
callback the Trainer's eval_dataset, so it is named here); outside hdet the callback changes nothing. The
model is GPT-2 built from a config (2 layers, width 64, 256 byte tokens:
nothing is downloaded), trained on the .py files of the standard library of
the Python running the script (tests and site-packages left out, the first
--corpus-bytes of them by path), split into training and evaluation by a
hash of each path. The last line is a JSON line with the evaluation loss.
"""

import argparse
import hashlib
import json
import os
import sysconfig

import torch
from transformers import GPT2Config, GPT2LMHeadModel, Trainer, TrainingArguments, set_seed

from hdet.integrations.transformers import HdetCallback

SKIP_DIRS = {"test", "tests", "idle_test", "site-packages", "dist-packages", "__pycache__"}


def load_text(limit):
    """(training bytes, evaluation bytes) from the standard library's .py files."""
    root = sysconfig.get_paths()["stdlib"]
    paths = []
    for folder, dirs, files in os.walk(root):
        dirs[:] = sorted(d for d in dirs if d not in SKIP_DIRS)
        paths += [os.path.join(folder, f) for f in sorted(files) if f.endswith(".py")]
    train, val, size = [], [], 0
    for path in sorted(paths):
        with open(path, "rb") as f:
            text = f.read()
        held_out = hashlib.sha256(os.path.relpath(path, root).encode()).digest()[0] < 26  # about 10%
        (val if held_out else train).append(text)
        size += len(text)
        if size >= limit:
            break
    return b"\0".join(train), b"\0".join(val)


class Windows(torch.utils.data.Dataset):
    """Fixed windows of `context` bytes, as input_ids and labels (the model shifts them)."""

    def __init__(self, data, context, count):
        data = torch.frombuffer(bytearray(data), dtype=torch.uint8).long()
        step = (len(data) - context) // count
        self.windows = data.unfold(0, context, max(step, 1))[:count]

    def __len__(self):
        return len(self.windows)

    def __getitem__(self, i):
        return {"input_ids": self.windows[i], "labels": self.windows[i]}


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--output-dir", default="runs/hf-finetune")
    ap.add_argument("--max-steps", type=int, default=300)
    ap.add_argument("--lr", type=float, default=1e-3)
    ap.add_argument("--scheduler", default="cosine",
                    help="lr_scheduler_type: linear, cosine, cosine_with_min_lr, warmup_stable_decay, "
                         "constant_with_warmup, ...")
    ap.add_argument("--warmup-steps", type=int, default=30)
    ap.add_argument("--batch-size", type=int, default=16)
    ap.add_argument("--grad-accum", type=int, default=1)
    ap.add_argument("--context", type=int, default=64)
    ap.add_argument("--corpus-bytes", type=int, default=4_000_000)
    ap.add_argument("--eval-items", type=int, default=512)
    ap.add_argument("--eval-steps", type=int, default=100)
    ap.add_argument("--save-steps", type=int, default=100)
    ap.add_argument("--logging-steps", type=int, default=10)
    ap.add_argument("--report-to", default="none", help="tensorboard, wandb, ... (none: the printed logs only)")
    ap.add_argument("--resume", help="a checkpoint folder, or 'last' for the newest one in --output-dir")
    ap.add_argument("--seed", type=int, default=0)
    args = ap.parse_args()

    set_seed(args.seed)
    train_text, val_text = load_text(args.corpus_bytes)
    train = Windows(train_text, args.context, len(train_text) // args.context)
    val = Windows(val_text, args.context, args.eval_items)
    config = GPT2Config(vocab_size=256, n_positions=args.context, n_embd=64, n_layer=2, n_head=4,
                        bos_token_id=0, eos_token_id=0)
    model = GPT2LMHeadModel(config)

    kwargs = {}
    if args.scheduler == "cosine_with_min_lr":
        kwargs["lr_scheduler_kwargs"] = {"min_lr_rate": 0.1}
    elif args.scheduler == "warmup_stable_decay":
        kwargs["lr_scheduler_kwargs"] = {"num_decay_steps": args.max_steps // 5}
    training_args = TrainingArguments(
        output_dir=args.output_dir,
        max_steps=args.max_steps,
        per_device_train_batch_size=args.batch_size,
        per_device_eval_batch_size=64,
        gradient_accumulation_steps=args.grad_accum,
        learning_rate=args.lr,
        lr_scheduler_type=args.scheduler,
        warmup_steps=args.warmup_steps,
        weight_decay=0.1,
        max_grad_norm=1.0,
        logging_steps=args.logging_steps,
        eval_strategy="steps",
        eval_steps=args.eval_steps,
        save_steps=args.save_steps,
        report_to=args.report_to,
        seed=args.seed,
        **kwargs,
    )
    trainer = Trainer(model=model, args=training_args, train_dataset=train, eval_dataset=val,
                      callbacks=[HdetCallback(probe_dataset=val)])
    resume = True if args.resume == "last" else args.resume
    trainer.train(resume_from_checkpoint=resume)
    metrics = trainer.evaluate()
    trainer.save_model()
    print(json.dumps({"eval_loss": metrics["eval_loss"], "steps": trainer.state.global_step}))


if __name__ == "__main__":
    main()
