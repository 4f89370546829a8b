"""Where a worker run's window hand-overs went, from its metrics.jsonl.

python bench/bill/phases.py RUN_DIR... prints, per pass, the median over
the windows (and the runs) of each phase of rank 0's hand-over
(docs/performance.md): the script's copy into the buffer, its DONE's write
and trip, hdet's gather, converge, plan, the wait it sees from its DONE to
the next PLAN, the PLAN's trip and the copy back; and the part of the wait
that no timer names (hdet's observe, checkpoint and the wake-ups between).
"""

from __future__ import annotations

import json
import statistics
import sys
from itertools import pairwise
from pathlib import Path

PHASES = ["copy_out", "send", "socket", "gather", "allreduce", "plan", "plan_socket", "load", "wait", "unnamed",
          "handover"]


def window_rows(run: Path) -> dict[int, list[dict[str, float]]]:
    """Per pass, one row of phase seconds per window that has a hand-over
    before it (a pass's first window has none)."""
    recs = [json.loads(line) for line in (run / "metrics.jsonl").read_text().splitlines() if line.strip()]
    wins = [r for r in recs if r.get("type") == "window"]
    out: dict[int, list[dict[str, float]]] = {}
    for prev, cur in pairwise(wins):
        if prev.get("pass", 0) != cur.get("pass", 0):
            continue
        h, hp = cur.get("handover_seconds") or {}, prev.get("handover_seconds") or {}
        if "wait" not in h:
            continue
        gather = prev.get("gather_seconds", 0.0)
        row = {"copy_out": hp.get("copy_out", 0.0), "send": h.get("send", 0.0), "socket": hp.get("socket", 0.0),
               "gather": gather, "allreduce": prev.get("converge_seconds", 0.0) - gather,
               "plan": cur.get("plan_seconds", 0.0), "plan_socket": h.get("plan_socket", 0.0),
               "load": h.get("load", 0.0), "wait": h["wait"]}
        row["unnamed"] = row["wait"] - (row["socket"] + gather + row["allreduce"] + prev.get("eval_seconds", 0.0)
                                        + row["plan"] + row["plan_socket"])
        row["handover"] = row["copy_out"] + row["send"] + row["wait"] + row["load"]
        out.setdefault(cur.get("pass", 0), []).append(row)
    return out


def main(argv: list[str]) -> int:
    if not argv:
        print("usage: phases.py RUN_DIR...", file=sys.stderr)
        return 2
    rows: dict[int, list[dict[str, float]]] = {}
    for d in argv:
        for p, rs in window_rows(Path(d)).items():
            rows.setdefault(p, []).extend(rs)
    print("| pass | hand-overs | " + " | ".join(PHASES) + " |")
    print("|---|---:|" + "---:|" * len(PHASES))
    for p in sorted(rows):
        med = [statistics.median(r[k] for r in rows[p]) * 1e3 for k in PHASES]
        print("| %s | %d | %s |" % ("main" if p else "search", len(rows[p]), " | ".join("%.2f" % m for m in med)))
    print("(ms, medians over the hand-overs)")
    return 0


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
