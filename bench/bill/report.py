"""The whole bill's table, from the runs scripts/bench-bill.sh left in OUT.

Per pair: torchrun's wall time and its training loop per step; hdet's wall
time, split into its search pass (the start record to the commit record),
the restart (inside the main pass's first plan), the main pass (the commit
plus the restart to the last window record) and the rest (start-up of
mpirun, hdet, Python and torch, the final evaluation, teardown); the main
pass's training loop per step (the main-pass script's own JSON line) against
torchrun's. Medians and ranges over the pairs.
"""

from __future__ import annotations

import json
import statistics
import sys
from pathlib import Path
from typing import Any


def script_result(log: Path) -> dict[str, Any]:
    """The GPT script's result line (rank 0's JSON with val_bpb; under
    hdet the script's lines carry a "[rank N] " prefix)."""
    for line in log.read_text(errors="replace").splitlines():
        line = line.strip()
        if line.startswith("[rank "):
            line = line.split("] ", 1)[-1]
        if line.startswith("{") and '"val_bpb"' in line:
            result: dict[str, Any] = json.loads(line)
            return result
    raise SystemExit("%s: no result line (the run failed?)" % log)


def hdet_passes(run: Path) -> dict[str, float]:
    recs = [json.loads(x) for x in (run / "metrics.jsonl").read_text().splitlines() if x.strip()]
    start = next(r for r in recs if r["type"] == "start")
    commit = next((r for r in recs if r["type"] == "commit"), None)
    wins = [r for r in recs if r["type"] == "window"]
    if commit is None:
        return {"search": wins[-1]["time"] - start["time"], "restart": 0.0, "main": 0.0, "search_steps": 0.0,
                "main_windows": 0.0}
    main = [r for r in wins if r.get("pass", 0) == 1]
    restart = main[0].get("plan_seconds", 0.0)
    return {"search": commit["time"] - start["time"], "restart": restart,
            "main": main[-1]["time"] - commit["time"] - restart, "search_steps": float(commit["step"]),
            "main_windows": float(len(main)), "search_windows": float(len(wins) - len(main))}


def spread(xs: list[float], pct: bool = False) -> str:
    def f(x: float) -> str:
        return "%+.1f%%" % (100 * x) if pct else "%.3fx" % x

    return "%s (%s..%s)" % (f(statistics.median(xs)), f(min(xs)), f(max(xs)))


def main(argv: list[str]) -> int:
    if len(argv) != 1:
        print("usage: report.py OUT", file=sys.stderr)
        return 2
    out = Path(argv[0])
    print((out / "setup.txt").read_text().rstrip())
    rows = []
    print("\n| pair | torchrun wall s | torchrun ms/step | hdet wall s | search s (steps) | restart s | main s "
          "| other s | hdet main ms/step | wall hdet/torchrun | main per step vs torchrun | val_bpb t / h | load |")
    print("|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    p = 0
    while (out / ("torchrun-%d" % p)).is_dir():
        t, h = out / ("torchrun-%d" % p), out / ("hdet-%d" % p)
        tr, hr = script_result(t / "out.log"), script_result(h / "out.log")
        tw, hw = float((t / "wall").read_text()), float((h / "wall").read_text())
        ps = hdet_passes(h / "run")
        t_step, h_step = 1e3 * tr["seconds"] / tr["steps"], 1e3 * hr["seconds"] / hr["steps"]
        other = hw - ps["search"] - ps["restart"] - ps["main"]
        row = {"wall": hw / tw - 1, "step": h_step / t_step - 1, "tw": tw, "hw": hw}
        rows.append(row)
        print("| %d | %.1f | %.1f | %.1f | %.1f (%d) | %.1f | %.1f | %.1f | %.1f | %.3fx | %+.1f%% | %.4f / %.4f | %s / %s |"
              % (p, tw, t_step, hw, ps["search"], ps["search_steps"], ps["restart"], ps["main"], other, h_step,
                 hw / tw, 100 * row["step"], tr["val_bpb"], hr["val_bpb"], (t / "load").read_text().strip(),
                 (h / "load").read_text().strip()))
        p += 1
    if not rows:
        print("no pairs in %s" % out, file=sys.stderr)
        return 1
    print("\n%d pairs. Whole run, hdet over torchrun: median %s (target: at most 1.35x). Main pass per step, hdet "
          "against torchrun: %s (target: at most +2%%)."
          % (len(rows), spread([1 + r["wall"] for r in rows]), spread([r["step"] for r in rows], pct=True)))
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
