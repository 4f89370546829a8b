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

import os
import sys
from collections.abc import Sequence
from typing import Any, Callable

import torch
import transformers
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

    probe_examples: items of eval_dataset (drawn once with a fixed seed, the
      same on every rank, collated by the Trainer's data collator) on which
      hdet compares the replicas by the Trainer's loss; 0, or no
      eval_dataset: the training losses.
    probe: a function() -> loss of your own instead.
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
                 report: str | None = "hdet.json") -> None:
        self._opts = _common.Options(_BY, probe_examples=probe_examples, probe=probe, window=window,
                                     explore=explore, alpha=alpha, spread=spread, auto=auto, dropout=dropout,
                                     callbacks=callbacks, report=report)
        self._attached = _common.AttachedOptimizer(self._opts)
        self._trainer: Any = None
        self._user_output_dir: str | None = None
        if _session.under_hdet():
            leave_accelerate_world()
            _common.check_single_process(_BY)

    # -- set-up -----------------------------------------------------------

    def on_init_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        if _session.under_hdet():
            self._bind(_common.find_self(transformers.Trainer))

    def _bind(self, trainer: Any) -> None:
        """Run first among the Trainer's callbacks: on_log's additions then
        reach every reporting callback (TensorBoard, W&B, the printer), and
        the folders move before TensorBoardCallback opens its writer."""
        if trainer is None:
            raise RuntimeError("%s: cannot find the Trainer that runs this callback (a Trainer subclass that "
                               "does not call Trainer.__init__?)" % _BY)
        self._trainer = trainer
        cbs = trainer.callback_handler.callbacks
        if self in cbs:
            cbs.remove(self)
        cbs.insert(0, self)

    def on_train_begin(self, args: Any, state: Any, control: Any, model: Any = None, optimizer: Any = None,
                       train_dataloader: Any = None, **kwargs: Any) -> None:
        inner = _torch_optimizer(optimizer)
        total = int(state.max_steps) - int(state.global_step)
        if total <= 0:
            return  # resumed at the end: nothing to train
        if not _session.under_hdet():
            self._attached.attach(inner, total, None, model)  # the checks alone
            return
        if self._trainer is None:  # trainer.add_callback(...) after the Trainer was built
            trainer = _common.find_self(transformers.Trainer)
            self._bind(trainer)
            early = [type(cb).__name__ for cb in trainer.callback_handler.callbacks[1:]
                     if hasattr(cb, "tb_writer") and cb.tb_writer is not None]
            if early:
                raise RuntimeError("%s: %s started writing before this callback could move its folder; pass "
                                   "HdetCallback in Trainer(callbacks=[...])" % (_BY, ", ".join(early)))
        trainer = self._trainer
        _common.check_single_process(_BY)
        self._redirect(args, trainer)
        _common.offset_data_order(train_dataloader)
        probe = self._opts.probe
        if probe is None and self._opts.probe_examples > 0:
            probe = _eval_probe(trainer, self._opts.probe_examples)
        self._attached.attach(inner, total, probe, trainer.model, int(state.global_step))
        _repoint_accelerate(optimizer, inner)

    def _redirect(self, args: Any, trainer: Any) -> None:
        """Every process but the main pass's rank 0 writes under
        output_dir/hdet/<pass>/rank-<r> (checkpoints, TensorBoard's runs/,
        W&B's run name gets a -hdet-<pass>-rank<r> suffix). Done here, after
        train() resolved resume_from_checkpoint=True in the output_dir the
        user gave (every replica of both passes resumes from the same
        checkpoint), and before the other callbacks open their writers
        (this one runs first)."""
        self._user_output_dir = args.output_dir
        if _common.is_primary():
            return
        if args.output_dir:
            args.output_dir = _common.replica_dir(args.output_dir)
        suffix = "-hdet-%s-rank%d" % (_common.pass_name(), _common.replica_rank())
        if getattr(args, "run_name", None):
            args.run_name = args.run_name + suffix
        env_dir = os.environ.get("TENSORBOARD_LOGGING_DIR")
        if env_dir:
            os.environ["TENSORBOARD_LOGGING_DIR"] = _common.replica_dir(env_dir)
        for cb in trainer.callback_handler.callbacks:
            d = getattr(cb, "logging_dir", None)
            if isinstance(d, str) and d and getattr(cb, "tb_writer", None) is None:
                cb.logging_dir = _common.replica_dir(d)

    # -- steps ------------------------------------------------------------

    def on_pre_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._attached.before_step()

    def on_optimizer_step(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        self._attached.after_step()

    def on_step_end(self, args: Any, state: Any, control: Any, **kwargs: Any) -> None:
        values = self._attached.window_start()
        if values and self._trainer is not None:
            self._trainer.log(values)  # each window's values once, at its first step

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


def _eval_probe(trainer: Any, examples: int) -> Callable[[], float] | None:
    """The Trainer's loss on `examples` items of eval_dataset (the first one
    of a dict), drawn with a fixed seed, collated as the Trainer's
    evaluation collates them; None without an eval_dataset of known size."""
    ds = trainer.eval_dataset
    if isinstance(ds, dict):
        ds = next(iter(ds.values()), None)
    if ds is None or isinstance(ds, torch.utils.data.IterableDataset):
        return None
    try:
        n = len(ds)
    except TypeError:
        return None
    if n == 0:
        return None
    picked = _common.fixed_indices(n, examples)
    batches: list[Any] = []

    def load() -> None:
        sub = ds.select(picked) if hasattr(ds, "select") and hasattr(ds, "column_names") \
            else torch.utils.data.Subset(ds, picked)
        args = trainer.args
        persistent = args.dataloader_persistent_workers
        args.dataloader_persistent_workers = False  # not cached as the Trainer's own eval loader
        try:
            batches.extend(trainer.get_eval_dataloader(sub))
        finally:
            args.dataloader_persistent_workers = persistent

    @torch.no_grad()
    def probe() -> float:
        if not batches:
            load()
        model = trainer.model
        was_training = model.training
        model.eval()
        try:
            total, count = 0.0, 0
            for inputs in batches:
                with trainer.compute_loss_context_manager():
                    loss = trainer.compute_loss(model, inputs)
                k = _common.batch_rows(inputs) or 1
                total += float(loss) * k
                count += k
        finally:
            model.train(was_training)
        return total / count

    return probe
