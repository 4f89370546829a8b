"""A Hugging Face Trainer script written in the order many are: the
TrainingArguments first, and hdet's callback imported where it is used,
after them (tests/integrations_test.go). Under `hdet run --worker` the
arguments' construction makes accelerate set up a torch.distributed world
of every rank (the worker's RANK, WORLD_SIZE, MASTER_ADDR), which the
callback must take apart: each replica trains alone.

A regression MLP (8 -> 32 -> 1) on a fixed random linear problem, AdamW,
the Trainer's cosine schedule with warm-up. --save-steps and --resume
(a checkpoint folder, or "last") are the Trainer's. At the first
training step the script prints one "HDET-TEST {json}" line of what the
Trainer sees; at the end one "HDET-RESULT {json}" line: the parameters'
sum and the Trainer's global step.

For the resume tests: --dropout P puts a dropout layer in the model (its
masks come from the generators a resume restores); STOP_AT=PASS:STEP in the
environment (search or main) makes HDET_RANK 0 send SIGUSR1 to its hdet at
the start of that global step, as a time limit would (hdet checkpoints at
the window's end and exits 3), KILL_AT=PASS:STEP makes it SIGKILL itself
there (a lost process); with --record DIR every process appends a
line per optimizer step to DIR/steps-rankR.jsonl (its pid, pass and step).
"""

import argparse
import json
import os
import signal
import time

import torch
from transformers import Trainer, TrainerCallback, TrainingArguments, set_seed
from transformers.trainer_utils import get_last_checkpoint


class Net(torch.nn.Module):
    def __init__(self, dropout=0.0):
        super().__init__()
        layers = [torch.nn.Linear(8, 32), torch.nn.Tanh()] + ([torch.nn.Dropout(dropout)] if dropout else [])
        self.body = torch.nn.Sequential(*layers, torch.nn.Linear(32, 1))

    def forward(self, x, labels=None):
        out = self.body(x).squeeze(-1)
        return {"loss": torch.nn.functional.mse_loss(out, labels), "logits": out}


class Items(torch.utils.data.Dataset):
    def __init__(self, n, seed):
        g = torch.Generator().manual_seed(seed)
        self.x = torch.randn(n, 8, generator=g)
        w = torch.linspace(-1, 1, 8)
        self.y = self.x @ w + 0.1 * torch.randn(n, generator=g)

    def __len__(self):
        return len(self.x)

    def __getitem__(self, i):
        return {"x": self.x[i], "labels": self.y[i]}


class Report(TrainerCallback):
    """The HDET-TEST line, at the first step this process trains."""

    printed = False
    world_before_import = False

    def on_step_begin(self, args, state, control, **kwargs):
        if Report.printed:
            return
        Report.printed = True
        from hdet.integrations import hidden_environment

        d = torch.distributed
        print("HDET-TEST " + json.dumps({
            "rank": int(os.environ.get("HDET_RANK", "0")), "pass": os.environ.get("HDET_PASS") or "search",
            "hidden": sorted(hidden_environment()), "processes": args.world_size,
            "torch_world": d.get_world_size() if d.is_initialized() else 0, "output_dir": args.output_dir,
            "global_step": state.global_step, "world_before_import": Report.world_before_import}), flush=True)


class StopAndRecord(TrainerCallback):
    """STOP_AT and --record (see the module's doc)."""

    def __init__(self, record):
        self.stop = os.environ.get("STOP_AT", "").split(":") if os.environ.get("STOP_AT") else None
        self.kill = os.environ.get("KILL_AT", "").split(":") if os.environ.get("KILL_AT") else None
        self.rank, self.pass_ = int(os.environ.get("HDET_RANK", "0")), os.environ.get("HDET_PASS") or "search"
        self.record = None
        if record:
            os.makedirs(record, exist_ok=True)
            self.record = open(os.path.join(record, "steps-rank%d.jsonl" % self.rank), "a")

    def on_step_begin(self, args, state, control, **kwargs):
        if self.stop and self.rank == 0 and self.pass_ == self.stop[0] and state.global_step == int(self.stop[1]):
            os.kill(os.getppid(), signal.SIGUSR1)  # hdet, as mpirun forwards a time limit's signal
            time.sleep(0.5)  # a time limit's signal comes mid-step, not 1 ms before the window's end
        if self.kill and self.rank == 0 and self.pass_ == self.kill[0] and state.global_step == int(self.kill[1]):
            os.kill(os.getpid(), signal.SIGKILL)  # a lost process: no checkpoint of hdet's or the Trainer's

    def on_train_begin(self, args, state, control, optimizer=None, **kwargs):
        if self.record is not None:  # the torch optimizer inside accelerate's
            optimizer.optimizer.register_step_post_hook(lambda *_: self.recorded(state.global_step))

    def recorded(self, step):
        """A step trained: after its update, inside the step call, which hdet
        holds at a window's end until the next window (or ends the process)."""
        self.record.write(json.dumps({"pid": os.getpid(), "pass": self.pass_, "step": step}) + "\n")
        self.record.flush()


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--output-dir", required=True)
    ap.add_argument("--max-steps", type=int, default=24)
    ap.add_argument("--save-steps", type=int, default=0, help="0: no checkpoints")
    ap.add_argument("--resume", help="a checkpoint folder, 'last', or 'auto' (the last, when there is one)")
    ap.add_argument("--window", type=int, help="HdetCallback's window")
    ap.add_argument("--dropout", type=float, default=0.0)
    ap.add_argument("--record", help="folder for the steps each process ran")
    args = ap.parse_args()
    torch.set_num_threads(1)
    torch.use_deterministic_algorithms(True)
    set_seed(0)
    training_args = TrainingArguments(
        output_dir=args.output_dir, max_steps=args.max_steps, per_device_train_batch_size=16,
        per_device_eval_batch_size=64, learning_rate=3e-3, lr_scheduler_type="cosine", warmup_steps=4,
        logging_steps=4, eval_strategy="no", save_strategy="steps" if args.save_steps else "no",
        save_steps=args.save_steps or 500, report_to="none", seed=0, use_cpu=True, dataloader_num_workers=0,
        disable_tqdm=True)
    Report.world_before_import = torch.distributed.is_initialized()  # accelerate's, of every rank
    from hdet.integrations.transformers import HdetCallback  # imported where it is used

    evals = Items(64, 2)
    trainer = Trainer(model=Net(args.dropout), args=training_args, train_dataset=Items(512, 1), eval_dataset=evals,
                      callbacks=[HdetCallback(probe_examples=64, probe_dataset=evals, window=args.window), Report(),
                                 StopAndRecord(args.record)])
    resume = True if args.resume == "last" else args.resume
    if args.resume == "auto":  # a requeued job's own checkpoint, if it has one (output_dir: under hdet the replica's)
        resume = os.path.isdir(trainer.args.output_dir) and get_last_checkpoint(trainer.args.output_dir) is not None
    trainer.train(resume_from_checkpoint=resume or None)
    total = sum(float(p.detach().double().sum()) for p in trainer.model.parameters())
    print("HDET-RESULT " + json.dumps({"param_sum": total, "global_step": trainer.state.global_step}), flush=True)


if __name__ == "__main__":
    main()
