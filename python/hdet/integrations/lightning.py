"""hdet for Lightning 2.x: one callback.

    import lightning as L
    from hdet.integrations.lightning import HdetCallback

    trainer = L.Trainer(max_epochs=3, callbacks=[HdetCallback()])
    trainer.fit(model, train_loader, val_loader)

Launched with `mpirun -np N hdet run --worker -- python train.py`, each
rank's Trainer trains one replica: the optimizer configure_optimizers
returns is attached to hdet with total_steps = the Trainer's
estimated_stepping_batches (optimizer steps: accumulate_grad_batches
counted), its scheduler sets the base rate hdet multiplies, and hdet
compares the replicas on a fixed slice of the validation dataloader
(probe_examples items, the loss validation_step returns or logs), or by
their training losses without one. Importing this module under hdet makes
each replica a one-process world (Lightning would otherwise pick a SLURM,
MPI or TorchElastic environment and a rank from the launchers' variables);
processes other than the main pass's rank 0 write their logs and
checkpoints under <dir>/hdet/<pass>/rank-<r>. Outside hdet the callback
checks its arguments and changes nothing. docs/integrations.md has the
whole story.
"""

from __future__ import annotations

import contextlib
import inspect
import os
import sys
import warnings
from collections.abc import Mapping, Sequence
from typing import Any, Callable

import torch

from .. import _resume, _session
from . import _common

_common.hide_launcher_environment()

try:
    import lightning.pytorch as pl
except ImportError:  # only the standalone package
    import pytorch_lightning as pl  # type: ignore[no-redef]

_BY = "hdet.integrations.lightning.HdetCallback"


_RANK_ZERO_MODULES = ("lightning_utilities.core.rank_zero", "lightning.fabric.utilities.rank_zero",
                      "lightning_fabric.utilities.rank_zero")


def _set_rank_zero_only(rank: int) -> None:
    """rank_zero_only.rank, Lightning's public answer to "which process
    writes" (read by its loggers, checkpoints and warnings), in each copy of
    it that is loaded. Lightning reads it from RANK / LOCAL_RANK /
    SLURM_PROCID when it is imported, which may have been before this
    module hid them."""
    for name in _RANK_ZERO_MODULES:
        fn = getattr(sys.modules.get(name), "rank_zero_only", None)
        if fn is not None:
            fn.rank = rank


def _rank_zero() -> None:
    """Every replica (of one process) is rank zero."""
    if _common.replica_size() == 1:
        _set_rank_zero_only(0)


def _hold_folders() -> None:
    """Until the callback's setup has moved this process's folders, it is
    not rank zero: Lightning opens every logger's experiment (its folder,
    TensorBoard's event file) before any callback's setup runs, and a
    logger's experiment on a process that is not rank zero is a dummy that
    creates nothing. The main pass's rank 0 writes where the script asked
    and is not held. Lightning's order (loggers' experiments, then the
    callbacks' setup, ModelCheckpoint's last) is its internal
    trainer.call._call_setup_hook, tested with Lightning 2.6.6:
    LightningTest.test_under_hdet fails if a logger opens its folder where
    the script asked."""
    if _common.replica_size() == 1 and not _common.is_primary():
        _set_rank_zero_only(1)


class HdetCallback(pl.Callback):
    """Trains this Trainer's fit as one hdet replica (see the module's doc).

    probe_examples: items of the (first) validation dataloader's dataset
      (drawn once with a fixed seed, the same on every rank, collated by its
      collate_fn; an iterable dataset: its first batches) on which hdet
      compares the replicas; 0, or no validation data: the training losses.
    probe_metric: the name validation_step logs its loss under; default:
      the loss it returns, else the first logged name with "loss" in it.
    probe: a function() -> loss of your own instead.
    window, explore, alpha, spread, auto, callbacks: hdet.attach's.
    dropout: True for every dropout layer of the LightningModule, or a
      module or function(p), as hdet.attach's.
    report: the file the main pass's rank 0 writes in the Trainer's
      default_root_dir at the end (the committed multiplier and the rates
      it gives); None: none.
    """

    def __init__(self, probe_examples: int = 256, *, probe_metric: str | None = None,
                 probe: Callable[[], float] | None = None, window: int | None = None,
                 explore: Sequence[Any] | None = None, alpha: float | None = None, spread: str | None = None,
                 auto: dict[str, Any] | None = None, dropout: Any = None,
                 callbacks: dict[str, Callable[[float], Any]] | None = None,
                 report: str | None = "hdet.json") -> None:
        super().__init__()
        self._opts = _common.Options(_BY, probe_examples=probe_examples, probe=probe, window=window,
                                     explore=explore, alpha=alpha, spread=spread, auto=auto, dropout=dropout,
                                     callbacks=callbacks, report=report)
        if probe_metric is not None and not isinstance(probe_metric, str):
            raise TypeError("%s: probe_metric must be a logged name, got %r" % (_BY, probe_metric))
        self._metric = probe_metric
        self._attached = _common.AttachedOptimizer(self._opts)
        self._resume = _common.TrainerResume(_BY, RESUME_FIX)
        self._resume_ckpt: dict[str, Any] | None = None  # at hdet's resume: this replica's checkpoint of its step
        self._user_root: str | None = None
        self._prepared = False
        self._stepped = False
        if _session.under_hdet():
            _common.hide_launcher_environment()
            _silence_srun_warning()
            _hold_folders()
            _common.check_single_process(_BY)

    # -- set-up -----------------------------------------------------------

    def prepare(self, trainer: Any) -> None:
        """At the fit's setup, before any logger opened its folder (each
        was a dummy until now: _hold_folders) and before ModelCheckpoint's
        setup (Lightning runs checkpoint callbacks last): every process but
        the main pass's rank 0 writes under <dir>/hdet/<pass>/rank-<r>, and
        is rank zero from here on. A ckpt_path given to fit ("last"
        included) was resolved before, in the folders the user gave: every
        replica of both passes resumes from the same checkpoint."""
        if self._prepared or not _session.under_hdet():
            return
        self._prepared = True
        _rank_zero()
        _common.check_single_process(_BY)
        if trainer.world_size != _common.replica_size():
            raise RuntimeError("%s: the Trainer runs %d processes (devices=%s, num_nodes=%s), but under hdet each "
                               "replica trains alone: leave devices and num_nodes at one per replica"
                               % (_BY, trainer.world_size, trainer.num_devices, trainer.num_nodes))
        self._user_root = trainer.default_root_dir
        self._load_resume(trainer)
        if _common.is_primary():
            return
        if isinstance(getattr(trainer, "_default_root_dir", None), str):
            trainer._default_root_dir = _common.replica_dir(trainer._default_root_dir)
        for lg in trainer.loggers:  # TensorBoard's and CSV's folders (W&B's local files too)
            if getattr(lg, "_experiment", None) is not None:
                warnings.warn("%s: %s opened its folder before the callback could move it; replicas may share "
                              "it" % (_BY, type(lg).__name__), stacklevel=2)
                continue
            for attr in ("_root_dir", "_save_dir"):
                d = getattr(lg, attr, None)
                if isinstance(d, (str, os.PathLike)) and os.fspath(d):
                    setattr(lg, attr, _common.replica_dir(os.fspath(d)))
        for cb in trainer.checkpoint_callbacks:
            if isinstance(getattr(cb, "dirpath", None), str):
                cb.dirpath = _common.replica_dir(cb.dirpath)

    def setup(self, trainer: Any, pl_module: Any, stage: str) -> None:
        if stage == "fit":
            self.prepare(trainer)

    def _load_resume(self, trainer: Any) -> None:
        """At a relaunch that hdet resumes at its step S: this replica's
        checkpoint of step S (saved by on_train_batch_end) becomes what the
        fit restores, whatever ckpt_path says. Lightning resolves ckpt_path
        ("last", "hpc" or a path) before any callback hook, in the folders
        the user gave, which hold the main pass's rank 0's checkpoints only.
        Without one (ckpt_path=None, or "last" with none found) the fit
        restores the checkpoint put here: the Trainer's private
        _checkpoint_connector._loaded_checkpoint, which its
        _restore_modules_and_callbacks and restore_training_state read
        after the setup hooks when resume_start got no path (Lightning
        2.6.6; LightningTest.test_resumes_at_hdets_step fails if that
        changes). With one, on_load_checkpoint puts this one in its place."""
        step = _common.resume_step()
        if step <= 0:
            return
        path = _resume_path(step)
        try:
            ckpt = torch.load(path, map_location="cpu", weights_only=False)
        except (OSError, RuntimeError, EOFError) as e:
            raise RuntimeError(
                "%s: hdet resumes this run at step %d of the %s pass, but this replica's Lightning checkpoint of "
                "that step (%s) cannot be read: %s. hdet saved its state there and the Trainer did not get to (the "
                "run was killed in between): this run cannot resume; start it in a new run directory; %s"
                % (_BY, step, _common.pass_name(), path, e, _common.DOCS)) from e
        self._resume_ckpt = ckpt
        connector = trainer._checkpoint_connector
        if not isinstance(getattr(connector, "_loaded_checkpoint", None), dict):
            raise RuntimeError("%s: this Lightning's Trainer has no _checkpoint_connector._loaded_checkpoint (tested "
                               "with Lightning 2.6.6): hdet cannot resume its fit" % _BY)
        connector._loaded_checkpoint = ckpt

    def on_save_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        """Every checkpoint the fit saves under hdet (ModelCheckpoint's too)
        says which run, pass and replica wrote it, at which step of hdet's."""
        if self._resume.optimizer is not None:
            checkpoint[_common.MARK] = self._resume.mark()

    def on_load_checkpoint(self, trainer: Any, pl_module: Any, checkpoint: dict[str, Any]) -> None:
        """The fit restores the checkpoint ckpt_path named: at hdet's resume,
        this replica's of hdet's step replaces it (its model weights now,
        the rest as the fit restores it). When hdet starts the pass afresh,
        a checkpoint an earlier launch of this run wrote is no start."""
        ours = self._resume_ckpt
        mark = checkpoint.get(_common.MARK)
        if ours is None and _session.under_hdet() and isinstance(mark, dict) and \
                mark.get("run_dir") == _common.identity()["run_dir"]:
            raise RuntimeError(
                "%s: hdet starts the %s pass of this run afresh (it has no checkpoint in it past step 0), but the "
                "fit's ckpt_path named %s, which an earlier launch of this run wrote (a kill before hdet's first "
                "checkpoint of the pass): move that launch's checkpoints away and launch again; %s"
                % (_BY, _common.pass_name(), _common.describe(mark), _common.DOCS))
        if ours is None or checkpoint is ours:
            return
        checkpoint.clear()
        checkpoint.update(ours)
        pl_module.load_state_dict(ours["state_dict"])

    def on_train_start(self, trainer: Any, pl_module: Any) -> None:
        optimizers = trainer.optimizers
        if not optimizers:
            raise RuntimeError("%s: configure_optimizers returned no optimizer" % _BY)
        if len(optimizers) > 1 and _session.under_hdet():
            raise RuntimeError("%s: hdet drives one optimizer per replica; configure_optimizers returned %d"
                               % (_BY, len(optimizers)))
        est = trainer.estimated_stepping_batches
        if est == float("inf"):
            raise ValueError("%s: the Trainer has no end (max_steps=-1, max_epochs=-1); hdet needs the number of "
                             "optimizer steps: set max_steps or max_epochs" % _BY)
        total = int(est) - int(trainer.global_step)
        if total <= 0:
            return
        opt = optimizers[0]
        if not _session.under_hdet():
            self._attached.attach(opt, total, None, pl_module)  # the checks alone
            return
        if self._resume_ckpt is not None and int(trainer.global_step) != int(self._resume_ckpt["global_step"]):
            raise RuntimeError("%s: hdet resumes this run at step %d of the %s pass, where this replica's Trainer "
                               "saved its step %d, but the fit is at step %d: %s"
                               % (_BY, _common.resume_step(), _common.pass_name(), self._resume_ckpt["global_step"],
                                  trainer.global_step, RESUME_FIX))
        self._resume_ckpt = None
        probe = self._opts.probe
        if probe is None and self._opts.probe_examples > 0:
            probe = _val_probe(trainer, pl_module, self._opts.probe_examples, self._metric)
        self._attached.attach(opt, total, probe, pl_module, int(trainer.global_step), self._resume)

    # -- steps ------------------------------------------------------------

    def on_before_optimizer_step(self, trainer: Any, pl_module: Any, optimizer: Any) -> None:
        if self._stepped:  # manual optimization: a second step in the same batch
            self._attached.after_step()
        self._attached.before_step()
        self._stepped = True

    def on_train_batch_end(self, trainer: Any, pl_module: Any, outputs: Any, batch: Any, batch_idx: int) -> None:
        if not self._stepped:
            return  # accumulating
        self._stepped = False
        self._attached.after_step()
        resume = self._resume
        if resume.due or resume.stop is not None:
            # hdet saved this step's state (a window end): the Trainer saves
            # its checkpoint of the same step, after the step's scheduler
            # update, as ModelCheckpoint does here; and stops if hdet stops.
            resume.due = False
            _save_resume(trainer, resume.hdet_step())
            resume.raise_stop()
        last = self._attached.last
        if not last:
            return
        for k, v in last.items():
            pl_module.log(k, v, on_step=True, on_epoch=False, logger=True, prog_bar=False, batch_size=1)
        start = self._attached.window_start()
        if start:  # each window's values once, at its first step, whatever log_every_n_steps is
            for lg in trainer.loggers:
                lg.log_metrics(start, step=trainer.global_step)

    def on_train_end(self, trainer: Any, pl_module: Any) -> None:
        if not _session.under_hdet() or self._attached.optimizer is None:
            return
        one_pass = self._attached.finished_in_search() and _common.replica_rank() == 0
        if _common.is_primary() or one_pass:
            self._attached.write_report(self._user_root or trainer.default_root_dir, None)


RESUME_FIX = ("the fit restores this replica's checkpoint of hdet's step by itself; a LightningModule or callback "
              "that changes the restored step or loops stops it; %s" % _common.DOCS)


def _resume_path(step: int, pass_name: str | None = None) -> str:
    """This process's Lightning checkpoint of hdet's step in the run
    directory: RUN_DIR/worker/lightning/<pass>-rank-<r>-step-<S>.ckpt."""
    run_dir = os.environ.get(_resume.ENV_RUN_DIR)
    if not run_dir:
        raise RuntimeError("%s: hdet did not give this worker its run directory (%s); this hdet is older than the "
                           "hdet Python package" % (_BY, _resume.ENV_RUN_DIR))
    return os.path.join(run_dir, "worker", "lightning", "%s-rank-%d-step-%d.ckpt"
                        % (pass_name or _common.pass_name(), _session.rank(), step))


def _save_resume(trainer: Any, step: int) -> None:
    """trainer.save_checkpoint at hdet's step (written to .tmp and renamed),
    and the older ones of this process and pass go, but the one before
    (hdet's previous checkpoint until its new one is written)."""
    path = _resume_path(step)
    os.makedirs(os.path.dirname(path), exist_ok=True)
    tmp = path + ".tmp"
    trainer.save_checkpoint(tmp)
    os.replace(tmp, path)
    folder, mine = os.path.dirname(path), os.path.basename(_resume_path(0))[:-len("0.ckpt")]
    steps = sorted(int(n[len(mine):-len(".ckpt")]) for n in os.listdir(folder)
                   if n.startswith(mine) and n.endswith(".ckpt") and n[len(mine):-len(".ckpt")].isdigit())
    for old in steps[:-2]:
        with contextlib.suppress(OSError):
            os.remove(os.path.join(folder, "%s%d.ckpt" % (mine, old)))


def _silence_srun_warning() -> None:
    """Lightning warns that srun is installed but not used: under hdet the
    task's variables are hidden on purpose."""
    warnings.filterwarnings("ignore", message=r"The `srun` command is available on your system but is not used")


def _first_loader(loaders: Any) -> Any:
    if loaders is None:
        return None
    if isinstance(loaders, Mapping):
        return next(iter(loaders.values()), None)
    if isinstance(loaders, (list, tuple)):
        return loaders[0] if loaders else None
    return loaders


def _val_probe(trainer: Any, module: Any, examples: int, metric: str | None) -> Callable[[], float] | None:
    """The validation loss on `examples` fixed items of the first validation
    dataloader; None without validation data."""
    loaders = trainer.val_dataloaders
    dl = _first_loader(loaders)
    if dl is None:
        return None
    several = isinstance(loaders, (list, tuple, Mapping)) and len(loaders) > 1
    batches: list[Any] = []

    def load() -> None:
        ds: Any = getattr(dl, "dataset", None)
        collate: Any = getattr(dl, "collate_fn", None)
        n = None
        if ds is not None and collate is not None and not isinstance(ds, torch.utils.data.IterableDataset):
            try:
                n = len(ds)
            except TypeError:
                n = None
        if n:
            picked = _common.fixed_indices(n, examples)
            bs = getattr(dl, "batch_size", None) or 64
            for i in range(0, len(picked), bs):
                batches.append(collate([ds[j] for j in picked[i:i + bs]]))
            return
        seen = 0
        for b in dl:  # an iterable dataset: its first batches
            batches.append(b)
            seen += _common.batch_rows(b) or 1
            if seen >= examples:
                break

    @torch.no_grad()
    def probe() -> float:
        if not batches:
            load()
        was_training = module.training
        module.eval()
        try:
            total, count = 0.0, 0
            for i, b in enumerate(batches):
                b = trainer.strategy.batch_to_device(b)
                with trainer.precision_plugin.val_step_context():
                    loss = _validation_loss(module, b, i, metric, several)
                k = _common.batch_rows(b) or 1
                total += loss * k
                count += k
        finally:
            module.train(was_training)
        return total / count

    return probe


def _validation_loss(module: Any, batch: Any, i: int, metric: str | None, several: bool) -> float:
    """validation_step's loss, with its self.log calls caught (they must not
    reach the training loop's results)."""
    logged: dict[str, Any] = {}

    def log(name: str, value: Any, *args: Any, **kwargs: Any) -> None:
        logged[name] = value

    def log_dict(d: Mapping[str, Any], *args: Any, **kwargs: Any) -> None:
        logged.update(d)

    module.__dict__["log"], module.__dict__["log_dict"] = log, log_dict
    try:
        kw = {"dataloader_idx": 0} if several and "dataloader_idx" in inspect.signature(
            module.validation_step).parameters else {}
        out = module.validation_step(batch, i, **kw)
    finally:
        module.__dict__.pop("log", None)
        module.__dict__.pop("log_dict", None)
    value = _pick_loss(out, logged, metric)
    if value is None:
        raise RuntimeError("%s: validation_step returned no loss and logged none%s; give HdetCallback("
                           "probe_metric=NAME) or probe=function" % (
                               _BY, "" if not logged else " with \"loss\" in its name (it logged %s)"
                               % ", ".join(sorted(logged))))
    return float(value.detach().float().mean()) if torch.is_tensor(value) else float(value)


def _pick_loss(out: Any, logged: dict[str, Any], metric: str | None) -> Any:
    if metric is not None:
        if metric in logged:
            return logged[metric]
        if isinstance(out, Mapping) and metric in out:
            return out[metric]
        raise RuntimeError("%s: validation_step did not log %r (it logged %s)"
                           % (_BY, metric, ", ".join(sorted(logged)) or "nothing"))
    if torch.is_tensor(out) and out.numel() == 1:
        return out
    if isinstance(out, Mapping) and "loss" in out:
        return out["loss"]
    names = [k for k in logged if "loss" in k.lower()]
    names.sort(key=lambda k: (not k.lower().startswith("val"), k))
    return logged[names[0]] if names else None


if _session.under_hdet():
    _rank_zero()
    _silence_srun_warning()
