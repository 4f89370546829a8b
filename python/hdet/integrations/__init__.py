"""hdet's callbacks for the trainers people train with, one module each:

    from hdet.integrations.transformers import HdetCallback   # transformers.Trainer(..., callbacks=[HdetCallback()])
    from hdet.integrations.lightning import HdetCallback      # lightning.pytorch.Trainer(..., callbacks=[HdetCallback()])

Importing this package imports neither library; importing one of its
modules imports that library. Under `hdet run --worker` the module's import
also makes each replica a one-process world for its trainer (it removes the
launchers' rank and size variables from os.environ: docs/integrations.md
lists them; hidden_environment() returns what was removed). Outside hdet
the callbacks check their arguments and change nothing.
"""

from ._common import hidden_environment

__all__ = ["hidden_environment"]
