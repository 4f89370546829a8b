"""What the Hugging Face and Lightning callbacks share; imports neither library.

- hide_launcher_environment(): under hdet, the replica's trainer must see a
  one-process world, so the launchers' rank and size variables leave
  os.environ (hdet's HDET_* stay; hdet.rank() reads those).
- replica_dir(path): where this process writes what the script asked to
  write under path: the main pass's rank 0 writes there, every other
  process under path/hdet/<pass>/rank-<r>.
- AttachedOptimizer: the attached optimizer as the callbacks drive it: the
  values of the last step for the trainer's logs, a step the trainer
  counted but AMP skipped handed to hdet as a step that moved nothing, and
  hdet.json.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
import types
from collections.abc import Iterator, Mapping, Sequence
from typing import Any, Callable

import torch

from .. import _args, _attach, _resume, _session
from .._values import as_float

PASS_ENV = "HDET_PASS"
DOCS = "docs/pytorch.md#resume"
# The key of hdet's mark in a trainer's checkpoint (the Hugging Face
# TrainerState's stateful_callbacks, Lightning's checkpoint dict).
MARK = "hdet"
REPLICA_SIZE_ENV = "HDET_REPLICA_SIZE"

# What launchers set to tell a process its place in a multi-process job. A
# trainer that sees one of them sets up (or waits for) a world of several
# processes: accelerate's PartialState reads LOCAL_RANK and the size
# variables (WORLD_SIZE, PMI_SIZE, OMPI_COMM_WORLD_SIZE, MV2_COMM_WORLD_SIZE);
# Lightning picks TorchElastic (TORCHELASTIC_RUN_ID), SLURM (SLURM_NTASKS),
# LSF (JSM_NAMESPACE_*) or MPI (mpi4py's world) and takes rank_zero_only's
# rank from RANK, LOCAL_RANK, SLURM_PROCID or JSM_NAMESPACE_RANK.
TORCHRUN_NAMES = ("RANK", "WORLD_SIZE", "LOCAL_RANK", "LOCAL_WORLD_SIZE", "GROUP_RANK", "GROUP_WORLD_SIZE",
                  "ROLE_RANK", "ROLE_WORLD_SIZE", "ROLE_NAME", "MASTER_ADDR", "MASTER_PORT")
TORCHRUN_PREFIXES = ("TORCHELASTIC_",)
LAUNCHER_NAMES = (
    # Open MPI's job description (its MCA settings other than these stay)
    "OMPI_UNIVERSE_SIZE", "OMPI_APP_CTX_NUM_PROCS", "OMPI_NUM_APP_CTX", "OMPI_FIRST_RANKS", "OMPI_MCA_ess",
    "OMPI_MCA_pmix",
    # MPICH and Intel MPI (Hydra)
    "MPI_LOCALRANKID", "MPI_LOCALNRANKS",
    # Slurm: the task's place in its step (the job's own variables stay)
    "SLURM_PROCID", "SLURM_LOCALID", "SLURM_NODEID", "SLURM_NTASKS", "SLURM_NPROCS", "SLURM_NTASKS_PER_NODE",
    "SLURM_TASKS_PER_NODE", "SLURM_STEP_NUM_TASKS", "SLURM_STEP_TASKS_PER_NODE", "SLURM_GTIDS",
)
LAUNCHER_PREFIXES = ("OMPI_COMM_WORLD_", "OMPI_MCA_ess_base_", "OMPI_MCA_orte_", "PMIX_", "PMI_",
                     "MV2_COMM_WORLD_", "JSM_NAMESPACE_")

# Data orders of replica r > 0 are the script's seed plus r times this.
SEED_STRIDE = 1_000_003


def replica_size() -> int:
    """G: the processes of one replica (hdet's train.replica_size; 1 unless set)."""
    try:
        return max(1, int(os.environ.get(REPLICA_SIZE_ENV, "1")))
    except ValueError:
        return 1


def replica_rank() -> int:
    """The hdet rank of this replica's first process (this rank when G = 1)."""
    r = _session.rank()
    return r - r % replica_size()


def hide_launcher_environment() -> dict[str, str]:
    """Under hdet, remove the launchers' rank and size variables from
    os.environ so that the trainer sees the one-process world of a plain
    `python train.py` (with replica groups, G > 1, hdet's RANK, WORLD_SIZE,
    LOCAL_RANK, MASTER_ADDR and MASTER_PORT describe the replica's own world
    and stay). Returns what this process hid so far; outside hdet nothing."""
    if not _session.under_hdet():
        return {}
    names: tuple[str, ...] = LAUNCHER_NAMES
    prefixes: tuple[str, ...] = LAUNCHER_PREFIXES
    if replica_size() == 1:
        names, prefixes = names + TORCHRUN_NAMES, prefixes + TORCHRUN_PREFIXES
    for name in list(os.environ):
        if name in names or name.startswith(prefixes):
            _attach._process.hidden_env[name] = os.environ.pop(name)
    return hidden_environment()


def hidden_environment() -> dict[str, str]:
    """The variables (name: value) the integration removed from this
    process's environment under hdet; empty outside hdet."""
    return dict(_attach._process.hidden_env)


def pass_name() -> str:
    """"main" in the main pass (hdet starts the script again with
    HDET_PASS=main), else "search"."""
    return "main" if os.environ.get(PASS_ENV) == "main" else "search"


def is_primary() -> bool:
    """True where the script's folders are used as given: outside hdet, and
    for the main pass's first replica."""
    return not _session.under_hdet() or (pass_name() == "main" and replica_rank() == 0)


def replica_dir(path: str) -> str:
    """Where this process writes what the script asked to write under path."""
    if is_primary() or not path:
        return path
    return os.path.join(path, "hdet", pass_name(), "rank-%d" % replica_rank())


def check_single_process(by: str) -> None:
    """A world of several processes that the script set up itself (the
    Hugging Face module takes apart the one accelerate set up for
    TrainingArguments built before its import) would train the replicas as
    one DDP job."""
    d = torch.distributed
    if d.is_available() and d.is_initialized() and d.get_world_size() != replica_size():
        raise RuntimeError(
            "%s: torch.distributed is set up with %d processes, but under hdet each replica trains alone (a "
            "replica of %d process(es)): leave init_process_group to the trainer, or give train.replica_size for "
            "replicas of several processes (docs/integrations.md)" % (by, d.get_world_size(), replica_size()))


def offset_data_order(loader: Any) -> int:
    """Replica r > 0 draws its own data order: the seeds found in loader and
    its wrappers (accelerate's SeedableRandomSampler.initial_seed, the
    torch.Generator of a sampler or DataLoader) move by r x SEED_STRIDE;
    replica 0 keeps the script's. Returns how many seeds moved."""
    r = replica_rank()
    if r == 0 or loader is None:
        return 0
    moved, generators = 0, {}
    for obj in _walk(loader):
        seed = vars(obj).get("initial_seed") if hasattr(obj, "__dict__") else None
        if isinstance(seed, int) and not isinstance(seed, bool):
            obj.initial_seed = (seed + SEED_STRIDE * r) % 2**63
            moved += 1
        g = getattr(obj, "generator", None)
        if isinstance(g, torch.Generator):
            generators[id(g)] = g
    for g in generators.values():
        g.manual_seed((g.initial_seed() + SEED_STRIDE * r) % 2**63)
    return moved + len(generators)


def _walk(loader: Any) -> Iterator[Any]:
    """loader and what it wraps (accelerate's DataLoaderShard, its base
    DataLoader, BatchSampler, BatchSamplerShard, the sampler), each once."""
    seen, todo = set(), [loader]
    while todo:
        obj = todo.pop()
        if obj is None or id(obj) in seen:
            continue
        seen.add(id(obj))
        yield obj
        for attr in ("sampler", "batch_sampler", "base_dataloader"):
            todo.append(getattr(obj, attr, None))


class Options:
    """The callbacks' hdet arguments, checked when the callback is built;
    what needs the optimizer (explore's names, window against total steps)
    is checked at the start of training, inside or outside hdet."""

    def __init__(self, by: str, *, probe_examples: int, probe: Callable[[], float] | None, window: int | None,
                 explore: Sequence[Any] | None, alpha: float | None, spread: str | None,
                 auto: dict[str, Any] | None, dropout: Any, callbacks: dict[str, Callable[[float], Any]] | None,
                 report: str | None) -> None:
        self.by = by
        if not isinstance(probe_examples, int) or isinstance(probe_examples, bool) or probe_examples < 0:
            raise ValueError("%s: probe_examples must be an int >= 0 (0: no probe), got %r" % (by, probe_examples))
        if probe is not None and not callable(probe):
            raise TypeError("%s: probe must be a function returning a loss, got %r" % (by, probe))
        if report is not None and (not isinstance(report, str) or not report):
            raise TypeError("%s: report must be a file name (or None for none), got %r" % (by, report))
        if callbacks is not None and not isinstance(callbacks, dict):
            raise TypeError("%s: callbacks must be a dict {name: function(value)}, got %r" % (by, callbacks))
        if dropout is not None and dropout is not True and not callable(dropout) \
                and not isinstance(dropout, torch.nn.Module):
            raise TypeError("%s: dropout must be True (the trainer's model), a module or a function(p), got %r"
                            % (by, dropout))
        _args.window(window, sys.maxsize)
        _args.alpha("alpha", alpha)
        _args.spread("spread", spread)
        _args.auto(auto)
        if explore is not None and (isinstance(explore, (str, dict)) or not isinstance(explore, (list, tuple))):
            raise TypeError("%s: explore must be a list of names or dicts, got %r" % (by, explore))
        self.probe_examples, self.probe, self.report = probe_examples, probe, report
        self.window, self.explore, self.alpha, self.spread, self.auto = window, explore, alpha, spread, auto
        self.dropout, self.callbacks = dropout, callbacks

    def attach_kwargs(self, model: torch.nn.Module | None) -> dict[str, Any]:
        dropout = model if self.dropout is True else self.dropout
        return {"window": self.window, "explore": self.explore, "alpha": self.alpha, "spread": self.spread,
                "auto": self.auto, "dropout": dropout, "callbacks": self.callbacks}

    def check(self, optimizer: torch.optim.Optimizer, total: int, model: torch.nn.Module | None) -> None:
        """What attach checks, without attaching (outside hdet: a second
        trainer.train() on the same optimizer must not fail)."""
        _attach.prepare(optimizer, total, by=self.by, **self.attach_kwargs(model))


def value_keys(status: dict[str, Any], applied_lr: float) -> dict[str, float]:
    """What the trainer's logs get from hdet.current() inside a step."""
    m = float(status["lr_multiplier"])
    out = {"hdet/lr": applied_lr, "hdet/lr_multiplier": m, "hdet/window": float(status["window"]),
           "hdet/pass": 1.0 if status["pass"] == "main" else 0.0}
    for name, v in sorted(status["values"].items()):
        if name == "lr":
            continue
        key = "hdet/lr_multiplier/" + name[3:] if name.startswith("lr/") else "hdet/" + name
        out[key] = float(v)
    if status["pass"] == "main":
        out["hdet/committed_lr_multiplier"] = m
    return out


def resume_step() -> int:
    """The step hdet resumes this launch at (its last window end in this
    pass, HDET_RESUME_STEP), 0 when the pass starts afresh."""
    req = _resume.request()
    return req[1] if req is not None else 0


def identity() -> dict[str, Any]:
    """Which process of which hdet run wrote a trainer checkpoint: the run
    directory, the pass and the replica (their checkpoints differ in the
    random generators and, across passes, in everything)."""
    return {"run_dir": os.environ.get(_resume.ENV_RUN_DIR, ""), "pass": pass_name(), "replica": replica_rank()}


def describe(mark: Any) -> str:
    """A checkpoint's mark (identity() and hdet's step at its save) in words."""
    if not isinstance(mark, dict):
        return "a checkpoint hdet did not mark (a run without hdet, or an older hdet)"
    return "one of replica %s of the %s pass of the run in %s (hdet's step %s)" % (
        mark.get("replica"), mark.get("pass"), mark.get("run_dir"), mark.get("hdet_step"))


class TrainerResume:
    """hdet's window-end checkpoints as the trainer's own (docs/pytorch.md#resume).

    Given to hdet.attach as state={"trainer": this}: at each of hdet's saves
    (a window end, inside the optimizer step that ends it) state_dict()
    marks a trainer checkpoint due, which the callback has the trainer
    write at the end of that step, in the folder the replica writes to.
    hdet's own file holds this step's mark; a relaunch that hdet resumes
    loads it back (load_state_dict) and check() compares it with the
    checkpoint the trainer resumed. A stop that hdet asks for at that
    window end is held (hold_stop) until the trainer has saved."""

    def __init__(self, by: str, fix: str) -> None:
        self.by, self.fix = by, fix  # fix: the trainer's way to resume the checkpoint hdet names
        self.optimizer: torch.optim.Optimizer | None = None
        self.offset = 0  # the trainer's step minus hdet's
        self.due = False  # hdet saved in this step: the trainer saves at its end
        self.stop: _session.Stopped | None = None  # hdet's stop, raised once the trainer saved
        self.saved: dict[str, Any] | None = None  # the mark hdet's file held, at a resume

    def hdet_step(self) -> int:
        status = _attach.current(self.optimizer) if self.optimizer is not None else None
        return int(status["step"]) if status is not None else 0

    def mark(self) -> dict[str, Any]:
        return dict(identity(), hdet_step=self.hdet_step())

    def state_dict(self) -> dict[str, Any]:
        self.due = True
        return dict(self.mark(), trainer_step=self.hdet_step() + self.offset)

    def load_state_dict(self, saved: dict[str, Any]) -> None:
        self.saved = dict(saved)

    def check(self, trainer_step: int) -> None:
        """At a resume: the trainer resumed the checkpoint that this replica
        saved at hdet's step (hdet's file says which)."""
        saved = self.saved or {}
        want = saved.get("trainer_step")
        if want != trainer_step or {k: saved.get(k) for k in identity()} != identity():
            raise RuntimeError(
                "%s: hdet resumes this run at step %d of the %s pass, where this replica's trainer saved its step %s, "
                "but the trainer resumed its step %d: %s" % (self.by, resume_step(), pass_name(), want, trainer_step,
                                                              self.fix))

    def hold_stop(self, optimizer: torch.optim.Optimizer) -> None:
        """hdet's stop (a signal: SIGUSR1, SIGTERM) comes inside the
        optimizer step that ends a window, after hdet saved its state
        there. The step returns instead, so that the trainer finishes it and
        saves its checkpoint of the same step; the callback then raises the
        stop (hdet.Stopped, exit 0). A second stop is raised at once."""
        hdet_step = optimizer.step

        def step(opt: torch.optim.Optimizer, *args: Any, **kwargs: Any) -> Any:
            try:
                return hdet_step(*args, **kwargs)
            except _session.Stopped as e:
                if self.stop is not None:
                    raise
                self.stop = e
                return None

        if getattr(hdet_step, "_wrapped_by_lr_sched", False):
            step._wrapped_by_lr_sched = True  # type: ignore[attr-defined]
        optimizer.step = types.MethodType(step, optimizer)  # type: ignore[method-assign]

    def raise_stop(self) -> None:
        """The trainer saved the step hdet stopped at: stop now."""
        if self.stop is not None:
            raise self.stop


def supersede(folder: str, names: Sequence[str]) -> list[str]:
    """Move checkpoints that come after the step hdet resumes at (a kill
    after the trainer's own save_steps; at a pass hdet starts afresh, all
    that an earlier launch of it saved) to folder/hdet-superseded, where the
    trainer's "newest checkpoint" no longer finds them; the resumed run
    writes those steps again. Returns the moved names."""
    moved = []
    for name in names:
        dst = os.path.join(folder, "hdet-superseded", name)
        if os.path.isdir(dst):
            shutil.rmtree(dst)
        os.makedirs(os.path.dirname(dst), exist_ok=True)
        os.replace(os.path.join(folder, name), dst)
        moved.append(name)
    if moved:
        print("hdet: %s: moved %s, saved after the step hdet resumes at, to %s" % (
            folder, ", ".join(moved), os.path.join(folder, "hdet-superseded")), file=sys.stderr, flush=True)
    return moved


class AttachedOptimizer:
    """The one optimizer a callback attaches, and what the callback keeps
    about its steps."""

    def __init__(self, opts: Options) -> None:
        self.opts = opts
        self.optimizer: torch.optim.Optimizer | None = None
        self.last: dict[str, float] = {}  # the log values of the last optimizer step
        self.skipped = 0  # steps the trainer counted and AMP skipped
        self._key: tuple[str, int] | None = None  # (pass, window) of the last step
        self._logged: tuple[str, int] | None = None
        self._before: tuple[int, list[torch.Tensor]] | None = None

    def attach(self, optimizer: torch.optim.Optimizer, total: int, probe: Callable[[], float] | None,
               model: torch.nn.Module | None, trainer_step: int = 0, resume: TrainerResume | None = None) -> None:
        """hdet.attach under hdet; outside it only attach's checks.

        trainer_step: the step the trainer's own checkpoint resumed at. At
        a relaunch that hdet resumes (at a window end S > 0) that is the
        trainer's checkpoint of hdet's step, which the callback checks
        (resume.check); hdet's file then loads the same parameters and
        optimizer state, and the group hyperparameters the trainer's
        scheduler set stay. Otherwise (hdet starts the pass afresh) a
        trainer_step > 0 is a deliberate start from a checkpoint hdet did
        not write (a plain run's, resolved in the folders the user gave, so
        the same for every replica of both passes): attach's start_step=0.

        resume: given to attach as state=, so that hdet's saves at window
        ends make the trainer save its own checkpoint there; a stop that
        hdet asks for inside a step is held until the trainer has saved
        that step (resume.stop)."""
        if not _session.under_hdet():
            self.opts.check(optimizer, total, model)
            return
        resuming = resume_step() > 0
        if resuming:
            total += resume_step()  # total: the trainer's steps left; hdet counts its run's from the step it resumes
        start = 0 if trainer_step > 0 and not resuming else None
        state = None
        if resume is not None:
            resume.offset = trainer_step - (resume_step() if resuming else 0)
            resume.optimizer = optimizer
            state = {"trainer": resume}
        groups = [{k: v for k, v in g.items() if k != "params"} for g in optimizer.param_groups]
        params = [p.detach().clone() for g in optimizer.param_groups for p in g["params"]] if resuming else []
        _attach.attach(optimizer, total, probe=probe, start_step=start, state=state, _by=self.opts.by,
                       **self.opts.attach_kwargs(model))
        self.optimizer = optimizer
        if resuming and resume is not None:
            resume.check(trainer_step)
            mine = [p for g in optimizer.param_groups for p in g["params"]]
            if any(not torch.equal(a, b.detach()) for a, b in zip(params, mine)):
                raise RuntimeError(
                    "%s: the trainer's checkpoint at its step %d holds other parameters than hdet's state at step %d "
                    "of the %s pass: it is not the checkpoint this replica saved there; %s"
                    % (self.opts.by, trainer_step, resume_step(), pass_name(), resume.fix))
            # hdet saved inside the window's last optimizer step, before the
            # trainer's scheduler stepped; the trainer's checkpoint, saved at
            # the end of that step, holds the rates the next step starts at.
            for g, kept in zip(optimizer.param_groups, groups):
                g.update(kept)
        if resume is not None:
            resume.hold_stop(optimizer)
        optimizer.register_step_pre_hook(self._inside)

    def _inside(self, opt: torch.optim.Optimizer, args: Any, kwargs: Any) -> None:
        """Inside the step (after hdet applied this step's values): record
        them for the trainer's logs."""
        status = _attach.current(opt)
        if status is None:
            return
        lr = as_float(opt.param_groups[0]["lr"])
        self.last = value_keys(status, lr)
        self._key = (status["pass"], int(status["window"]))

    def before_step(self) -> None:
        """The trainer is about to step the optimizer (after the backward)."""
        status = _attach.current(self.optimizer) if self.optimizer is not None else None
        recorder = _attach.loss_recorder(self.optimizer)
        if status is not None and recorder is not None:
            self._before = (int(status["step"]), list(recorder.pending))

    def after_step(self) -> bool:
        """The trainer has stepped the optimizer. A step hdet did not count
        (AMP's GradScaler found inf or NaN gradients: an unfused optimizer's
        step was never called, a fused one's skipped its update) still
        counts for the trainer (its global step, max_steps and the end of
        training); hdet gets it as a step that moves nothing, with the
        step's loss, so both count the same steps. Returns True for such a
        step."""
        before, self._before = self._before, None
        status = _attach.current(self.optimizer) if self.optimizer is not None else None
        if before is None or status is None or int(status["step"]) != before[0]:
            return False
        self._replay(before[1])
        return True

    def _replay(self, losses: list[torch.Tensor]) -> None:
        """One hdet step with every gradient None: torch's optimizers then
        leave parameters and state alone."""
        opt = self.optimizer
        assert opt is not None
        grads = [(p, p.grad) for g in opt.param_groups for p in g["params"]]
        for p, _ in grads:
            p.grad = None
        recorder = _attach.loss_recorder(opt)
        if recorder is not None and not recorder.pending:  # a fused step took the loss when it skipped
            recorder.pending.extend(losses)
        self.skipped += 1
        try:
            opt.step()
        finally:
            for p, g in grads:
                p.grad = g

    def window_start(self) -> dict[str, float] | None:
        """The last step's values when it was the first of a window whose
        values were not logged yet (each window's once)."""
        if self._key is None or self._key == self._logged:
            return None
        self._logged = self._key
        return dict(self.last)

    def finished_in_search(self) -> bool:
        """The run ended in this process's search pass (a one-pass run)."""
        status = _attach.current(self.optimizer) if self.optimizer is not None else None
        return status is not None and status["pass"] == "search" and status["step"] >= status["total_steps"]

    def write_report(self, folder: str, script_lr: float | None) -> str | None:
        """hdet.json in folder (the user's): the multiplier and the rates it
        gives, for a user to read back. Returns the path, None when not
        written."""
        status = _attach.current(self.optimizer) if self.optimizer is not None else None
        if status is None or self.opts.report is None or not folder:
            return None
        m = float(status["lr_multiplier"])
        data: dict[str, Any] = {
            "pass": status["pass"], "replica": replica_rank(), "replicas": _session.world_size() // replica_size(),
            "steps": status["step"], "total_steps": status["total_steps"], "skipped_steps": self.skipped,
            "lr_multiplier": m,
        }
        if script_lr is not None:
            data["script_lr"], data["lr"] = script_lr, script_lr * m
        peak = float(status["script_peak_lr"])
        if peak > 0:
            data["script_peak_lr"], data["peak_lr"] = peak, peak * m
        data["values"] = status["values"]
        os.makedirs(folder, exist_ok=True)
        path = os.path.join(folder, self.opts.report)
        tmp = path + ".tmp"
        with open(tmp, "w") as f:
            json.dump(data, f, indent=2, sort_keys=True)
            f.write("\n")
        os.replace(tmp, path)
        return path


def fixed_indices(n: int, examples: int, seed: int = 0) -> list[int]:
    """examples indices of range(n) drawn with a fixed seed: the same items
    on every rank, as hdet.probe_dataset draws them."""
    return torch.randperm(n, generator=torch.Generator().manual_seed(seed))[:examples].tolist()


def batch_rows(batch: Any) -> int:
    """The number of examples in a collated batch (its first tensor's rows)."""
    if torch.is_tensor(batch):
        return int(batch.shape[0]) if batch.dim() > 0 else 1
    if isinstance(batch, Mapping):  # a dict, transformers' BatchEncoding
        items: Sequence[Any] = list(batch.values())
    elif isinstance(batch, (list, tuple)):
        items = batch
    else:
        items = [v for v in vars(batch).values()] if hasattr(batch, "__dict__") else []
    for v in items:
        n = batch_rows(v)
        if n:
            return n
    return 0
