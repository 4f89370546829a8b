"""Each replica's data in local sync mode (docs/pytorch.md, "Each replica
sees its own data"): the script's own seeds in a search pass without a
probe that hdet restarts, this replica's own everywhere else."""

from __future__ import annotations

import random
import sys
from typing import Any, Callable

import torch

from . import _resume, _session


class ReplicaData:
    """Whether this replica draws its own data yet (own), and the reseed
    that gives it its own.

    The main pass (HDET_PASS=main) reseeds at attach, before the script
    draws anything, and so does a run that the attach line's own options
    make one pass, or that has a probe (own: hdet judges a search on a
    probe with each replica on its own batches). A first launch otherwise
    keeps the script's seeds, so every
    replica draws the script's batches and dropout masks, while hdet's
    plans say the window is in a search pass that the run will restart from
    step 0 (PLAN "search"): the search compares the replicas' rates on the
    same data. The first plan without it reseeds: in a run of one pass that
    is the plan the first step's hand-shake brings, so the replicas share
    that one step's batch (and what the script drew before it: a
    DataLoader's first epoch order, a permutation drawn before the loop);
    where a search that was to restart will not (an explorer frozen), the
    window after. A relaunch's saved state says which the replica was at
    (set_own)."""

    def __init__(self, own: bool = False, reseed: Callable[[], None] | None = None) -> None:
        self._reseed = reseed or reseed_replica
        self.own = own or _resume.pass_name() == "main"
        if self.own:
            self._reseed()

    def plan(self, search: bool) -> None:
        """A plan came; search: hdet's PLAN said the window shares batches."""
        if not self.own and not search:
            self.own = True
            self._reseed()

    def set_own(self, own: bool) -> None:
        """At a relaunch, what the saved state says (its RNG states, loaded
        after, are the replica's as they were)."""
        self.own = own


def one_pass(options: dict[str, Any]) -> bool:
    """Whether the attach line's own options (alpha=, auto=) leave the run
    one pass, with no search pass to restart: a zero spread, the auto phase
    off (unless auto.commit restart asks for a search anyway), auto.commit
    continue, the paper form, or auto.until 1. A config file can do the same
    (hdet's plans then say so at the first step: ReplicaData.plan)."""
    auto = options.get("auto") or {}
    return (options.get("alpha") == 0 or auto.get("commit") == "continue" or auto.get("form") == "paper"
            or (auto.get("enabled") is False and auto.get("commit") != "restart") or auto.get("until", 0) >= 1)


def reseed_replica() -> None:
    """In local sync mode rank r > 0 offsets torch's, random's and numpy's
    global seeds by r (rank 0 keeps the script's), so shuffling DataLoaders
    and torch.randint batches differ. A script that set up torch.distributed
    shards its data itself."""
    d = torch.distributed
    r = _session.rank()
    if r == 0 or (d.is_available() and d.is_initialized()):
        return
    seed = torch.initial_seed() + r
    torch.manual_seed(seed)
    random.seed(seed)
    np = sys.modules.get("numpy")
    if np is not None:
        np.random.seed(seed % 2**32)
