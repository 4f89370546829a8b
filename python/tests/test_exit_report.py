"""While a run is attached, an uncaught exception and an early end are told
to hdet; the hooks are installed at the run's start and put back at its end."""

import os
import subprocess
import sys
import unittest

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # test the checkout
from hdet import _attach
from hdet._exit_report import ExitReport

PYTHON_DIR = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")


class FakeRun:
    def __init__(self):
        self.step_num, self.total, self.reports, self.done = 3, 10, [], False

    def report(self, message):
        self.reports.append(message)

    def finished(self):
        return self.done


class ExitReportTest(unittest.TestCase):
    def setUp(self):
        self.before = sys.excepthook
        self.seen = []
        sys.excepthook = lambda *a: self.seen.append(a[0])
        self.addCleanup(setattr, sys, "excepthook", self.before)

    def raise_into_hook(self, exc):
        try:
            raise exc
        except BaseException as e:
            sys.excepthook(type(e), e, e.__traceback__)

    def test_an_exception_is_reported_and_the_previous_hook_still_runs(self):
        run = FakeRun()
        r = ExitReport(run)
        r.install()
        self.raise_into_hook(ValueError("bad batch"))
        self.assertEqual(run.reports, ["the script raised at step 3 of 10: ValueError: bad batch"])
        self.assertEqual(self.seen, [ValueError], "chained")
        r.remove()

    def test_remove_puts_the_previous_hook_back(self):
        previous = sys.excepthook
        r = ExitReport(FakeRun())
        r.install()
        self.assertIsNot(sys.excepthook, previous)
        r.remove()
        self.assertIs(sys.excepthook, previous)

    def test_a_hook_installed_over_ours_stays_and_ours_stops_reporting(self):
        run = FakeRun()
        r = ExitReport(run)
        r.install()
        ours = sys.excepthook
        theirs = []
        sys.excepthook = lambda *a: (theirs.append(a[0]), ours(*a))
        r.remove()
        self.raise_into_hook(KeyError("k"))
        self.assertEqual(theirs, [KeyError], "theirs stays")
        self.assertEqual(self.seen, [KeyError], "ours still chains to the one before it")
        self.assertEqual(run.reports, [], "but reports nothing once the run is over")

    def test_system_exit_is_not_reported(self):
        run = FakeRun()
        r = ExitReport(run)
        r.install()
        self.raise_into_hook(SystemExit(0))
        r.remove()
        self.assertEqual(run.reports, [])

    def test_the_process_installs_it_at_the_start_and_removes_it_at_the_end(self):
        previous = sys.excepthook
        process = _attach.Process()
        process.start(FakeRun())  # type: ignore[arg-type]
        self.assertIsNot(sys.excepthook, previous)
        process.end()
        self.assertIs(sys.excepthook, previous)


class AtExitTest(unittest.TestCase):
    """The exit function, in a process of its own."""

    def run_script(self, body):
        code = ("import sys; sys.path.insert(0, %r)\n"
                "from hdet._exit_report import ExitReport\n"
                "class Run:\n"
                "    step_num, total = 4, 10\n"
                "    def report(self, m): print(m)\n"
                "    def finished(self): return False\n"
                "r = ExitReport(Run())\n" % PYTHON_DIR) + body
        return subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True).stdout

    def test_an_early_end_is_reported(self):
        self.assertEqual(self.run_script("r.install()\n"),
                         "the script ended after 4 of the 10 optimizer steps it gave hdet (total_steps) before the "
                         "run finished\n")

    def test_nothing_after_the_run_ended(self):
        self.assertEqual(self.run_script("r.install()\nr.remove()\n"), "")


if __name__ == "__main__":
    unittest.main()
