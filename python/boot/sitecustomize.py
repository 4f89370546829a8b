"""hdet's start-up hook for a script under `hdet run --worker` (hdet puts
this folder first on the script's PYTHONPATH; elsewhere it is never on the
path, and without HDET_SOCKET it does nothing).

It says within the script's first optimizer step, not after a whole run,
that the script never called hdet.attach: once torch.optim is imported it
registers torch's global optimizer step pre-hook, which raises if an
optimizer steps while nothing is attached. The sitecustomize module this
one shadows (a distribution's, a virtual environment's) still runs.
"""

import importlib.abc
import importlib.machinery
import importlib.util
import os
import sys

_HERE = os.path.dirname(os.path.abspath(__file__))
_WATCHED = "torch.optim.optimizer"


def _unattached_step(optimizer, args, kwargs):
    from hdet import _attach

    if _attach._process.run is None:
        raise RuntimeError(
            "hdet: the script called %s.step() but never hdet.attach(optimizer, total_steps): under `hdet run "
            "--worker` add `optimizer = hdet.attach(optimizer, total_steps=...)` right after building the optimizer "
            "(or use hdet.OneCycleLR)" % type(optimizer).__name__)


class _Watcher(importlib.abc.MetaPathFinder):
    """Registers the hook once torch.optim.optimizer has been executed."""

    def find_spec(self, name, path=None, target=None):
        if name != _WATCHED:
            return None
        sys.meta_path.remove(self)
        spec = importlib.util.find_spec(name)
        if spec is None or spec.loader is None:
            return spec
        loader, exec_module = spec.loader, spec.loader.exec_module

        def exec_and_hook(module):
            exec_module(module)
            module.register_optimizer_step_pre_hook(_unattached_step)

        loader.exec_module = exec_and_hook
        return spec


def _chain():
    """Run the sitecustomize this one shadows, if any."""
    rest = [p for p in sys.path if os.path.abspath(p or os.curdir) != _HERE]
    spec = importlib.machinery.PathFinder.find_spec("sitecustomize", rest)
    if spec is not None and spec.loader is not None:
        module = importlib.util.module_from_spec(spec)
        spec.loader.exec_module(module)


_chain()
if os.environ.get("HDET_SOCKET"):
    sys.meta_path.insert(0, _Watcher())
