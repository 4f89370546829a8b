"""hdet for the Hugging Face Trainer: one callback.

    from hdet.integrations.transformers import HdetCallback

    trainer = Trainer(model=model, args=args, train_dataset=train, eval_dataset=val,
                      callbacks=[HdetCallback()])

Launched with `mpirun -np N hdet run --worker -- python finetune.py`, each
rank's Trainer trains one replica: its optimizer (the torch optimizer
inside accelerate's AcceleratedOptimizer) is attached to hdet with
total_steps = the Trainer's max_steps (optimizer steps), the Trainer's own
scheduler sets the base rate hdet multiplies, and hdet compares the
replicas on a fixed slice of eval_dataset (probe_examples items), or by
their training losses without one. Importing this module under hdet makes
each replica a one-process world (accelerate would otherwise start a
multi-process one from the launchers' variables); ranks other than the main
pass's rank 0 write under <output_dir>/hdet/<pass>/rank-<r>. Outside hdet
the callback checks its arguments and changes nothing. docs/integrations.md
has the whole story.
"""

from __future__ import annotations

import json
import os
import re
import sys
from collections.abc import Mapping, Sequence
from typing import Any, Callable

import torch
from transformers import TrainerCallback

from .. import _session
from . import _common

_BY = "hdet.integrations.transformers.HdetCallback"


def leave_accelerate_world() -> bool:
    """Under hdet: hide the launchers' variables and, when the script built
    its TrainingArguments before importing this module, take apart the
    torch.distributed world of every rank that accelerate's PartialState set
    up for them (the worker's RANK, WORLD_SIZE and MASTER_ADDR describe the
    run's world): the default process group is destroyed and PartialState
    set up again as a one-process world. The arguments keep their
    PartialState object, whose state accelerate shares between all of them,
    so they see the new world too. Returns True when it took a world apart.

    Private parts of accelerate read here, for want of public ones (tested
    with accelerate 1.16.0 and transformers 5.25.0; ReleaseAccelerateWorld
    in python/tests/test_integrations.py fails if they change):
    PartialState._shared_state (PartialState() would set a state up rather
    than say whether there is one) and AcceleratorState._reset_state (the
    reset TrainingArguments itself calls before setting its state up)."""
    if not _session.under_hdet():
        return False
    _common.hide_launcher_environment()  # with what accelerate wrote there for a CPU world
    d = torch.distributed
    state_module = sys.modules.get("accelerate.state")
    if state_module is None or not (d.is_available() and d.is_initialized()):
        return False
    shared = state_module.PartialState._shared_state  # PartialState() would set the state up
    size = d.get_world_size()
    if not shared or shared.get("num_processes") != size or size == _common.replica_size():
        return False  # not accelerate's world (check_single_process says so), or the replica's own
    cpu = shared["device"].type == "cpu"
    d.destroy_process_group()
    state_module.AcceleratorState._reset_state(reset_partial_state=True)
    state_module.PartialState(cpu=cpu)
    return True


if _session.under_hdet():
    leave_accelerate_world()


class HdetCallback(TrainerCallback):
    """Trains this Trainer's run as one hdet replica (see the module's doc).

    probe_examples: items (drawn once with a fixed seed, the same on every
      rank, collated by the Trainer's data collator) on which hdet compares
      the replicas by the model's loss: of probe_dataset, else of the
      training set (the Trainer hands its callbacks neither itself nor its
      eval_dataset); 0: the training losses.
    probe_dataset: the held-out items to draw them from, usually the
      Trainer's eval_dataset.
    probe: a function() -> loss of your own instead (a Trainer whose
      compute_loss is not the model's loss).
    window, explore, alpha, spread, auto, callbacks: hdet.attach's.
    dropout: True for every dropout layer of the Trainer's model, or a
      module or function(p), as hdet.attach's.
    report: the file the main pass's rank 0 writes in output_dir at the end
      (the committed multiplier and the rates it gives); None: none.
    """

    def __init__(self, probe_examples: int = 256, *, probe: Callable[[], float] | None = None,
                 window: int | None = None, explore: Sequence[Any] | None = None,
                 alpha: float | None = None, spread: str | None = None, auto: dict[str, Any] | None = None,
                 dropout: Any = None, callbacks: dict[str, Callable[[float], Any]] | None = None,
                 report: str | None = "hdet.json", probe_dataset: Any = None) -> None:
        if probe_dataset is not None and not hasattr(probe_dataset, "__getitem__"):
            raise TypeError("%s: probe_dataset must be a map-style dataset (the Trainer's eval_dataset), got %r"
                            % (_BY, probe_dataset))
        self._opts = _common.Options(_BY, probe_examples=probe_examples, probe=probe, window=window,
                                     explore=explore, alpha=alpha, spread=spread, auto=auto, dropout=dropout,
                                     callbacks=callbacks, report=report)
        self._attached = _common.AttachedOptimizer(self._opts)
        self._resume = _common.TrainerResume(_BY, RESUME_FIX)
        self._probe_dataset = probe_dataset
        self._user_output_dir: str | None = None
        self._redirected = False
        self._resume_from: tuple[str, int] | None = None  # at hdet's resume: (its checkpoint, its global step)
        if _session.under_hdet():
            leave_accelerate_world()
            _common.check_single_process(_BY)

    # -- set-up -----------------------------------------------------------

    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not _session.under_hdet():
            return
        self._user_output_dir = args.output_dir
        step = _common.resume_step()
        if step == 0:  # hdet starts this pass afresh: what an earlier launch of it saved is no start
            folder = _common.replica_dir(args.output_dir)
            _common.supersede(folder, [n for _, n in _checkpoints(folder) if _earlier_launch(_mark(folder, n))])
        if step > 0 or not _foreign(args.output_dir):
            # The replica's folder from the start: resume_from_checkpoint=True
            # finds its checkpoint of hdet's step there.
            self._redirect(args)
        if step > 0:
            self._resume_from = _checkpoint_of(args.output_dir, step)

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                       train_dataloader: Any = None, eval_dataloader: Any = None, **kwargs: Any) -> None:
        inner = _torch_optimizer(optimizer)
        total = int(state.max_steps) - int(state.global_step)
        if total <= 0:
            return  # resumed at the end: nothing to train
        if not _session.under_hdet():
            self._attached.attach(inner, total, None, model)  # the checks alone
            return
        _common.check_single_process(_BY)
        self._redirect(args)
        self._check_resumed(args, state)
        _common.offset_data_order(train_dataloader)
        probe = self._opts.probe
        if probe is None and self._opts.probe_examples > 0:
            probe = _probe(model, self._probe_dataset, eval_dataloader, train_dataloader, self._opts.probe_examples)
        self._attached.attach(inner, total, probe, model, int(state.global_step), self._resume)
        state.stateful_callbacks[_common.MARK] = self._resume.mark()
        _repoint_accelerate(optimizer, inner)

    def _check_resumed(self, args: Any, state: Any) -> None:
        """At a relaunch that hdet resumes at its step S: the Trainer must
        have resumed this replica's checkpoint of step S (found in
        on_init_end; the Trainer's state names the process that saved it)."""
        step = _common.resume_step()
        got, mark = int(state.global_step), state.stateful_callbacks.get(_common.MARK)
        if step <= 0:
            if got > 0 and isinstance(mark, dict) and mark.get("run_dir") == _common.identity()["run_dir"]:
                raise RuntimeError(
                    "%s: hdet starts the %s pass of this run afresh (it has no checkpoint in it past step 0), but "
                    "the Trainer resumed its step %d from %s, which an earlier launch of this run wrote: move "
                    "that launch's checkpoints out of %s; %s"
                    % (_BY, _common.pass_name(), got, _common.describe(mark), args.output_dir, _common.DOCS))
            return
        if self._resume_from is None:  # add_callback() after the Trainer was built
            self._resume_from = _checkpoint_of(args.output_dir, step)
        path, want = self._resume_from
        if got == want and isinstance(mark, dict) and {k: mark.get(k) for k in _common.identity()} == \
                _common.identity():
            return
        what = "started at step 0 (train() got no resume_from_checkpoint)" if got == 0 else \
            "resumed its step %d, from %s" % (got, _common.describe(mark))
        raise RuntimeError("%s: hdet resumes this run at step %d of the %s pass, where this replica's Trainer saved "
                           "%s (its step %d), but the Trainer %s: %s"
                           % (_BY, step, _common.pass_name(), path, want, what, RESUME_FIX))

    def _redirect(self, args: Any) -> None:
        """Every process but the main pass's rank 0 writes under
        output_dir/hdet/<pass>/rank-<r> (checkpoints, TensorBoard's runs/,
        W&B's run name gets a -hdet-<pass>-rank<r> suffix). Done when the
        Trainer is built (on_init_end), before train() resolves
        resume_from_checkpoint=True: a relaunch that hdet resumes finds the
        replica's own checkpoint of hdet's step. A fresh launch whose
        output_dir holds checkpoints (a run without hdet) moves at the
        start of training instead, after train() resolved True there:
        every replica of both passes starts from the same checkpoint."""
        if self._redirected:
            return
        self._redirected = True
        self._user_output_dir = args.output_dir
        if _common.is_primary():
            return
        if args.output_dir:
            args.output_dir = _common.replica_dir(args.output_dir)
        suffix = "-hdet-%s-rank%d" % (_common.pass_name(), _common.replica_rank())
        if getattr(args, "run_name", None):
            args.run_name = args.run_name + suffix
        _move_tensorboard_dir()

    # -- steps ------------------------------------------------------------

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._attached.before_step()

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._attached.after_step()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        resume = self._resume
        if resume.optimizer is None:
            return
        state.stateful_callbacks[_common.MARK] = resume.mark()  # in every checkpoint the Trainer saves
        if resume.due:  # hdet saved this step's state: the Trainer saves its checkpoint of the same step
            resume.due = False
            control.should_save = True
        if resume.stop is not None:  # and hdet stops there: save, then stop
            control.should_save, control.should_training_stop, control.should_evaluate = True, True, False

    def on_save(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._resume.raise_stop()

    def on_log(self, args: Any, state: Any, control: Any, logs: dict[str, Any] | None = None,
               **kwargs: Any) -> None:
        """Training logs (those with the loss) get this replica's rate and
        multiplier of the last step beside the Trainer's learning_rate (the
        script's rate); the callbacks after this one see them."""
        last = self._attached.last
        if not last or logs is None or "loss" not in logs or "hdet/lr" in logs:
            return
        logs.update(last)
        hist = state.log_history
        if hist and hist[-1].get("step") == state.global_step and "loss" in hist[-1]:
            hist[-1].update(last)

    def on_train_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if not _session.under_hdet() or self._attached.optimizer is None:
            return
        one_pass = self._attached.finished_in_search() and _common.replica_rank() == 0
        if one_pass and self._user_output_dir:
            args.output_dir = self._user_output_dir  # the run's model is this one: save_model() writes there
        if _common.is_primary() or one_pass:
            self._attached.write_report(self._user_output_dir or "", float(args.learning_rate))


RESUME_FIX = ("pass trainer.train(resume_from_checkpoint=True), which finds it (under hdet output_dir is the replica's "
              "folder from the Trainer's construction on); a path the script computes from output_dir names the "
              "main pass's rank 0's; %s" % _common.DOCS)


def _checkpoints(folder: str | None) -> list[tuple[int, str]]:
    """(global step, name) of the Trainer's checkpoints in folder, in order."""
    if not folder or not os.path.isdir(folder):
        return []
    out = []
    for name in os.listdir(folder):
        m = re.fullmatch(r"checkpoint-(\d+)", name)
        if m and os.path.isdir(os.path.join(folder, name)):
            out.append((int(m.group(1)), name))
    return sorted(out)


def _mark(folder: str, name: str) -> Any:
    try:
        with open(os.path.join(folder, name, "trainer_state.json")) as f:
            return (json.load(f).get("stateful_callbacks") or {}).get(_common.MARK)
    except (OSError, ValueError):
        return None


def _foreign(folder: str | None) -> list[str]:
    """The checkpoints in folder that no launch of this run saved (a run
    without hdet's, another run's): a fresh launch may start from them. The
    main pass's rank 0 moves its own of an earlier launch at the same time,
    so they do not count."""
    run_dir = _common.identity()["run_dir"]
    return [n for _, n in _checkpoints(folder)
            if not isinstance(m := _mark(folder or "", n), dict) or m.get("run_dir") != run_dir]


def _earlier_launch(mark: Any) -> bool:
    """A checkpoint that this replica saved in this pass of this run."""
    me = _common.identity()
    return isinstance(mark, dict) and {k: mark.get(k) for k in me} == me


def _checkpoint_of(folder: str, step: int) -> tuple[str, int]:
    """This replica's checkpoint in folder that the Trainer saved at hdet's
    step (its mark says so), as (path, global step). Checkpoints after it
    (the Trainer's own save_steps, before a kill) move aside, so that
    resume_from_checkpoint=True finds it."""
    me = _common.identity()
    found = [(g, n) for g, n in _checkpoints(folder)
             if isinstance(m := _mark(folder, n), dict) and m.get("hdet_step") == step
             and {k: m.get(k) for k in me} == me]
    if not found:
        have = ", ".join(n for _, n in _checkpoints(folder)) or "none"
        raise RuntimeError(
            "%s: hdet resumes this run at step %d of the %s pass, but this replica's Trainer saved no checkpoint of "
            "that step in %s (it has: %s). hdet saved its state there and the Trainer did not get to (the run was "
            "killed in between, or the checkpoint was deleted): this run cannot resume; start it in a new run "
            "directory; %s" % (_BY, step, _common.pass_name(), folder, have, _common.DOCS))
    g, name = found[-1]
    _common.supersede(folder, [n for h, n in _checkpoints(folder) if h > g])
    return os.path.join(folder, name), g


def _torch_optimizer(optimizer: Any) -> torch.optim.Optimizer:
    """The torch optimizer the Trainer steps (accelerate wraps it)."""
    inner = getattr(optimizer, "optimizer", optimizer)
    if not isinstance(inner, torch.optim.Optimizer):
        raise TypeError("%s: the Trainer's optimizer is a %s, not a torch.optim.Optimizer (DeepSpeed's and other "
                        "engines' optimizers are not supported)" % (_BY, type(inner).__name__))
    return inner


def _repoint_accelerate(wrapper: Any, inner: torch.optim.Optimizer) -> None:
    """With a GradScaler (fp16), accelerate swaps the torch optimizer's step
    for one it saved when it wrapped the optimizer, before hdet attached, and
    puts that one back after each step: it must save hdet's instead."""
    if getattr(wrapper, "scaler", None) is None or not hasattr(wrapper, "_optimizer_original_step_method"):
        return
    from accelerate.optimizer import patch_optimizer_step

    wrapper._optimizer_original_step_method = inner.step
    wrapper._optimizer_patched_step_method = patch_optimizer_step(wrapper, inner.step)


def _move_tensorboard_dir() -> None:
    """TENSORBOARD_LOGGING_DIR, which TensorBoardCallback reads when the
    Trainer is built, in the replica's folder (done at import too)."""
    env_dir = os.environ.get("TENSORBOARD_LOGGING_DIR")
    if env_dir and not _common.is_primary() and os.sep + "hdet" + os.sep not in env_dir:
        os.environ["TENSORBOARD_LOGGING_DIR"] = _common.replica_dir(env_dir)


def _probe(model: Any, dataset: Any, eval_loader: Any, train_loader: Any, examples: int) -> Callable[[], float] | None:
    """The model's loss on `examples` fixed items of dataset (else of the
    evaluation loader's dataset when the Trainer has one, else of the
    training set), collated by the Trainer's collator (the loader's
    collate_fn); None without a dataset of known size."""
    loader = eval_loader if eval_loader is not None else train_loader
    ds = dataset
    for src in (eval_loader, train_loader):
        if ds is None and src is not None:
            ds = getattr(src, "dataset", None)
    collate = getattr(loader, "collate_fn", None) or getattr(train_loader, "collate_fn", None)
    if ds is None or collate is None or isinstance(ds, torch.utils.data.IterableDataset):
        return None
    try:
        n = len(ds)
    except TypeError:
        return None
    if n == 0:
        return None
    picked = _common.fixed_indices(n, examples)
    size = getattr(loader, "batch_size", None) or getattr(getattr(loader, "batch_sampler", None), "batch_size", 0) \
        or 64
    batches: list[Any] = []

    @torch.no_grad()
    def probe() -> float:
        if not batches:
            batches.extend(collate([ds[j] for j in picked[i:i + size]]) for i in range(0, len(picked), size))
        device = next(model.parameters()).device
        was_training = model.training
        model.eval()
        try:
            total, count = 0.0, 0
            for inputs in batches:
                out = model(**_to(inputs, device))
                loss = out["loss"] if isinstance(out, Mapping) else out[0]
                k = _common.batch_rows(inputs) or 1
                total += float(loss) * k
                count += k
        finally:
            model.train(was_training)
        return total / count

    return probe


def _to(batch: Any, device: torch.device) -> Any:
    if torch.is_tensor(batch):
        return batch.to(device)
    if isinstance(batch, Mapping):
        return {k: _to(v, device) for k, v in batch.items()}
    return batch


if _session.under_hdet():
    _move_tensorboard_dir()
