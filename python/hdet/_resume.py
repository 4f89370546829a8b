"""Worker runs that resume at the step (docs/pytorch.md#resume).

hdet asks a resumable worker (attach got state= or start_step=) to save at
a window end, after the converge: the file holds the attached optimizer, its
parameters, every object of state= (anything with state_dict() and
load_state_dict(), torch.distributed.checkpoint's Stateful convention), the
client's own state and the random generators. A relaunch names the file in
HDET_RESUME_STATE (and its step in HDET_RESUME_STEP); attach loads it before
it returns, so the script continues at hdet.start_step() as if never
stopped.
"""

from __future__ import annotations

import contextlib
import os
import random
import shutil
import sys
from typing import Any, BinaryIO, cast

import torch

ENV_STATE = "HDET_RESUME_STATE"
ENV_STEP = "HDET_RESUME_STEP"
ENV_RUN_DIR = "HDET_RUN_DIR"
ENV_PASS = "HDET_PASS"
FORMAT = 1  # of the file's dict; a file of another format is refused
DOCS = "docs/pytorch.md#resume"


def pass_name() -> str:
    """"main" in the main pass (hdet starts the script again with
    HDET_PASS=main), else "search"."""
    return "main" if os.environ.get(ENV_PASS) == "main" else "search"


def check_state(state: Any, by: str) -> dict[str, Any] | None:
    """state= as a dict of named Stateful objects, or an error naming the bad one."""
    if state is None:
        return None
    if not isinstance(state, dict):
        raise TypeError("%s: state must be a dict {name: object with state_dict() and load_state_dict()}, got %s"
                        % (by, type(state).__name__))
    for name, obj in state.items():
        if not isinstance(name, str):
            raise TypeError("%s: state's keys must be strings, got %r" % (by, name))
        if not (callable(getattr(obj, "state_dict", None)) and callable(getattr(obj, "load_state_dict", None))):
            raise TypeError("%s: state[%r] (a %s) has no state_dict() and load_state_dict(); wrap it in an object "
                            "that has both (torch.distributed.checkpoint's Stateful)" % (by, name, type(obj).__name__))
    return dict(state)


def check_start_step(v: Any, by: str) -> int | None:
    if v is None:
        return None
    if not isinstance(v, int) or isinstance(v, bool) or v < 0:
        raise TypeError("%s: start_step must be an int >= 0 (the step the script's own checkpoint resumed), got %r"
                        % (by, v))
    return int(v)


def request() -> tuple[str, int] | None:
    """(file, step) when hdet launched this worker to resume, else None."""
    path = os.environ.get(ENV_STATE)
    if not path:
        return None
    try:
        step = int(os.environ.get(ENV_STEP, ""))
    except ValueError:
        raise RuntimeError("hdet: %s=%s comes without a step (%s=%r)"
                           % (ENV_STATE, path, ENV_STEP, os.environ.get(ENV_STEP))) from None
    return path, step


def checkpoint_path(path: str, under_hdet: bool, rank: int, emptied: set[str]) -> str:
    """path in the main pass and outside hdet; in the search pass a file of
    the same name under the run directory, so what the search pass saves
    never becomes the main pass's start. A search pass that hdet starts
    afresh (it resumes nothing) empties the folder first: an earlier
    launch's files there are no start for it either. emptied: the folders
    this process has started afresh (it adds the one it empties)."""
    if not under_hdet or pass_name() == "main":
        return path
    run_dir = os.environ.get(ENV_RUN_DIR)
    if not run_dir:
        raise RuntimeError("hdet.checkpoint_path: hdet did not give this worker its run directory (%s); this hdet "
                           "is older than the hdet Python package" % ENV_RUN_DIR)
    folder = os.path.join(run_dir, "worker", "search", "rank-%d" % rank)
    if folder not in emptied and request() is None and os.path.isdir(folder):
        shutil.rmtree(folder)
    emptied.add(folder)
    os.makedirs(folder, exist_ok=True)
    return os.path.join(folder, os.path.basename(path))


def rng_state() -> dict[str, Any]:
    """The generators a script's data order and dropout draw from."""
    out: dict[str, Any] = {"python": random.getstate(), "torch": torch.get_rng_state()}
    np = sys.modules.get("numpy")
    if np is not None:
        out["numpy"] = np.random.get_state()
    if torch.cuda.is_available() and torch.cuda.is_initialized():
        out["cuda"] = torch.cuda.get_rng_state_all()
    return out


def set_rng_state(saved: dict[str, Any]) -> None:
    random.setstate(saved["python"])
    torch.set_rng_state(saved["torch"])
    if "numpy" in saved:
        import numpy as np  # it was imported when the state was saved

        np.random.set_state(saved["numpy"])
    if "cuda" in saved:
        torch.cuda.set_rng_state_all(saved["cuda"])


def write(path: str, contents: dict[str, Any] | str | None) -> None:
    """torch.save contents to path.tmp (a str: copy that file; None: a
    file that says the launch starts fresh), fsync, rename: a kill leaves
    the old file or the new one, never half of one."""
    folder = os.path.dirname(path) or "."
    os.makedirs(folder, exist_ok=True)
    tmp = path + ".tmp"
    try:
        if isinstance(contents, str):
            shutil.copyfile(contents, tmp)
        with open(tmp, "ab" if isinstance(contents, str) else "wb") as f:
            if not isinstance(contents, str):
                _save(contents if contents is not None else {"format": FORMAT, "fresh": True}, f)
            f.flush()
            os.fsync(f.fileno())
        os.replace(tmp, path)
    except BaseException:
        # A full disk: what was written of the file goes, so the space does.
        with contextlib.suppress(OSError):
            os.remove(tmp)
        raise
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)  # the rename itself
    finally:
        os.close(fd)


class _WriteErrors:
    """A file's write and flush that keep the OSError a write raised:
    torch.save's zip writer turns it into a RuntimeError ("unexpected pos
    64 vs 0", torch 2.15), and a full disk must stay an OSError, which the
    session answers as a refused save (the checkpoint skipped, the run on)."""

    def __init__(self, f: BinaryIO) -> None:
        self.f = f
        self.error: OSError | None = None

    def write(self, b: bytes) -> int:
        try:
            return self.f.write(b)
        except OSError as e:
            self.error = e
            raise

    def flush(self) -> None:
        self.f.flush()


def _save(obj: dict[str, Any], f: BinaryIO) -> None:
    """torch.save obj to f; a write the disk refused raises its OSError."""
    sink = _WriteErrors(f)
    try:
        torch.save(obj, cast(BinaryIO, sink))
    except RuntimeError:
        if sink.error is not None:
            raise sink.error from None
        raise


def read(path: str, step: int) -> dict[str, Any]:
    """The file hdet named for this relaunch, checked against its step."""
    try:
        # Not weights_only: the file is this run's own (hdet wrote its path),
        # and holds the script's state objects and numpy's generator.
        contents = torch.load(path, map_location=None, weights_only=False)
    except (OSError, RuntimeError, EOFError) as e:
        raise RuntimeError("hdet: cannot read the state to resume at step %d from %s: %s" % (step, path, e)) from e
    if not isinstance(contents, dict) or contents.get("format") != FORMAT:
        raise RuntimeError("hdet: %s is not a state file of this hdet package (format %r, want %d)"
                           % (path, contents.get("format") if isinstance(contents, dict) else None, FORMAT))
    if contents.get("fresh"):
        return contents
    if contents.get("step") != step:
        raise RuntimeError("hdet: %s holds step %s, but hdet resumes at step %d" % (path, contents.get("step"), step))
    return contents
