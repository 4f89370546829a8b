"""Issue 51 on the peers study's MLP + AdamW (bench/peers/mlp.py, 937 steps, mpirun -np 4): hdet with the
attach line alone and with a probe from 10x below, at and 10x above the sweep's best max_lr (0.0046, seed 1,
docs/benchmarks.md), plain training at each start and at what hdet committed, on held-out seeds.

    .venv/bin/python bench/noharm/mlp_cells.py [--seeds 4] [--runs runs/noharm-mlp]

Results are JSON lines in RUNS/results.jsonl (a run already there is not made again); a markdown table
of test loss against plain training at the best point, per seed, goes to stdout.
"""

import argparse
import json
import os
import re
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from results import Results  # noqa: E402

BEST = 0.0046
STARTS = [("at best", BEST), ("10x below", 0.00046), ("10x above", 0.046)]
COMMITTED = re.compile(r"committed after a search pass of (\d+) steps: lr x([0-9.e+-]+): peak lr \S+ -> \S+ \(x\S+\)( \((kept: .*)\))?")


def run(args, kind, lr, seed):
    py = [args.python, "bench/peers/mlp.py", "--max-lr", "%.4g" % lr, "--seed", str(seed)]
    if kind == "plain":
        p = subprocess.run(py, capture_output=True, text=True, check=True)
        return json.loads(p.stdout.strip().splitlines()[-1])
    flags = ["--hdet", "--probe"] if kind == "probe" else ["--hdet"]
    rundir = os.path.join(args.runs, "%s-%.4g-%d" % (kind, lr, seed))
    cmd = ["mpirun", "-np", "4", "--oversubscribe", "--bind-to", "none", args.hdet, "run", "--run-dir", rundir,
           "--progress", "none", "--log-format", "json", "--worker", "--", *py, *flags]
    p = subprocess.run(cmd, capture_output=True, text=True)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-3000:] + p.stderr[-3000:])
        raise SystemExit("bench/noharm: %s failed (exit %d)" % (" ".join(cmd), p.returncode))
    res = {}
    for line in p.stdout.splitlines():
        if line.startswith("[rank 0] {"):
            res.update(json.loads(line[len("[rank 0] "):]))
        m = COMMITTED.search(line)
        if m:
            res.update(search_steps=int(m.group(1)), committed=float(m.group(2)), note=m.group(4) or "")
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default="runs/noharm-mlp")
    ap.add_argument("--seeds", default="4")
    ap.add_argument("--python", default=".venv/bin/python")
    ap.add_argument("--hdet", default="bin/hdet")
    ap.add_argument("--table", action="store_true", help="only print the table of the results there are")
    args = ap.parse_args()
    done = Results(args.runs)

    def get(kind, lr, seed):
        if (kind, lr, seed) not in done and not args.table:
            r = run(args, kind, lr, seed)
            r.update(kind=kind, lr=lr, seed=seed)
            print(json.dumps(done.add(r)), flush=True)
        return done.get((kind, lr, seed))

    seeds = [int(s) for s in args.seeds.split(",")]
    for seed in seeds:
        get("plain", BEST, seed)
        for _, lr in STARTS:
            for kind in ("hdet", "probe"):
                r = get(kind, lr, seed)
                if r and r.get("committed"):
                    get("plain", float("%.4g" % (lr * r["committed"])), seed)
            get("plain", lr, seed)
    print("| seed | start | plain at the start | hdet alone | its commit, plain | hdet + probe | its commit, plain |")
    print("|---|---|---:|---:|---:|---:|---:|")
    for seed in seeds:
        ref = done.get(("plain", BEST, seed))
        if not ref:
            continue

        def pct(r, ref=ref):
            return "%+.1f %%" % (100 * (r["test_loss"] / ref["test_loss"] - 1)) if r else "-"

        for name, lr in STARTS:
            cells = [pct(done.get(("plain", lr, seed)))]
            for kind in ("hdet", "probe"):
                r = done.get((kind, lr, seed))
                c = done.get(("plain", float("%.4g" % (lr * r["committed"])), seed)) if r and r.get("committed") else None
                cells += [pct(r) + (" (x%.3g%s)" % (r["committed"], ", kept" if r.get("note") else "") if r else ""), pct(c)]
            print("| %d | %s | %s |" % (seed, name, " | ".join(cells)))


if __name__ == "__main__":
    main()
