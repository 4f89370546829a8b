"""Telling hdet why a script stops early, for as long as a run is attached.

hdet's Go side sees the worker exit and quotes the last Python traceback
from its stderr, but it cannot tell at which of its steps the script
raised, nor that a script which returned with status 0 stopped before the
total_steps it gave attach: only the client knows the step. Python offers no
narrower place to learn of an uncaught exception than sys.excepthook, so
ExitReport chains it (calling whatever hook was there before) and registers
an atexit function, at attach, and puts both back when the run ends (hdet's
STOP). A hook someone installed over ours in between stays, and ours under it
only reports while the run is on.
"""

from __future__ import annotations

import atexit
import sys
import traceback
import types
from typing import Any, Callable, Protocol


class Run(Protocol):
    """What ExitReport reads of the attached run."""

    step_num: int
    total: int

    def report(self, message: str) -> None: ...

    def finished(self) -> bool: ...


class ExitReport:
    """The exception hook and the exit function of one attached run."""

    def __init__(self, run: Run) -> None:
        self.run = run
        self.installed = False
        self._previous: Callable[[type[BaseException], BaseException, types.TracebackType | None], Any] = \
            sys.__excepthook__

    def install(self) -> None:
        if self.installed:
            return
        self.installed = True
        self._previous = sys.excepthook
        sys.excepthook = self._excepthook
        atexit.register(self._at_exit)

    def remove(self) -> None:
        if not self.installed:
            return
        self.installed = False
        if sys.excepthook == self._excepthook:
            sys.excepthook = self._previous
        atexit.unregister(self._at_exit)

    def _excepthook(self, kind: type[BaseException], value: BaseException, tb: types.TracebackType | None) -> None:
        if self.installed and not issubclass(kind, SystemExit):
            line = "".join(traceback.format_exception_only(kind, value)).strip()
            self.run.report("the script raised at step %d of %d: %s" % (self.run.step_num, self.run.total, line))
        self._previous(kind, value, tb)

    def _at_exit(self) -> None:
        if not self.run.finished():
            self.run.report("the script ended after %d of the %d optimizer steps it gave hdet (total_steps) before "
                            "the run finished" % (self.run.step_num, self.run.total))
