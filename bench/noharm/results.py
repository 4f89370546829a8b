"""The results file of both drivers: a JSON line a run, keyed by (kind, lr, seed), appended as each run
ends, so that a rerun makes only the runs not there yet."""

import json
import os


class Results(dict):
    def __init__(self, folder):
        super().__init__()
        os.makedirs(folder, exist_ok=True)
        self.path = os.path.join(folder, "results.jsonl")
        if os.path.exists(self.path):
            with open(self.path) as f:
                for line in f:
                    self._keep(json.loads(line))

    def _keep(self, r):
        self[(r["kind"], r["lr"], r["seed"])] = r

    def add(self, r):
        """Keeps r (which names its kind, lr and seed) and appends it to the file."""
        self._keep(r)
        with open(self.path, "a") as f:
            f.write(json.dumps(r) + "\n")
        return r
