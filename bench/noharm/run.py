"""Issue 51's no-harm check on bench/noharm/regression.py: plain runs, hdet with the attach line alone,
with a probe, and the same ranks without the search, at the script's rate and 10x off, on held-out seeds.

    .venv/bin/python bench/noharm/run.py [--runs runs/noharm] [--seeds 2,3,4,5] [--np 2]

Every result is a JSON line in RUNS/results.jsonl (a run already there is
not made again); at the end a markdown table of medians goes to stdout.
The sweep that picks the best rate uses seed 1 alone (--sweep-seed).
"""

import argparse
import json
import os
import re
import statistics
import subprocess
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
import regression  # bench/noharm/regression.py: the plain runs, in process
from results import Results

SCRIPT = "bench/noharm/regression.py"
SWEEP = [3e-4, 1e-3, 3e-3, 1e-2, 3e-2, 1e-1]
COMMITTED = re.compile(r"committed after a search pass of (\d+) steps: lr x([0-9.e+-]+): peak lr \S+ -> \S+ \(x\S+\)( \((kept: .*)\))?")


def run_one(args, kind, lr, seed):
    """One run; returns its result dict."""
    py = [args.python, SCRIPT, "--lr", repr(lr), "--seed", str(seed)]
    if kind == "plain":  # in this process: torch's import costs more than the training
        return {"lr": lr, "seed": seed, "val_mse": regression.train(lr, seed)}
    flags = {"hdet": ["--hdet"], "probe": ["--hdet", "--probe"], "nosearch": ["--hdet", "--no-search"]}[kind]
    rundir = os.path.join(args.runs, "%s-%g-%d" % (kind, lr, seed))
    cmd = ["mpirun", "-np", str(args.np), "--oversubscribe", "--bind-to", "none", args.hdet, "run", "--run-dir", rundir,
           "--progress", "none", "--log-format", "json", "--worker", "--", *py, *flags]
    env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")  # as bench/peers/run.py
    p = subprocess.run(cmd, capture_output=True, text=True, env=env)
    if p.returncode != 0:
        sys.stderr.write(p.stdout[-3000:] + p.stderr[-3000:])
        raise SystemExit("bench/noharm: %s failed (exit %d)" % (" ".join(cmd), p.returncode))
    res = None
    for line in p.stdout.splitlines():
        if line.startswith("[rank 0] {"):
            res = json.loads(line[len("[rank 0] "):])
        m = COMMITTED.search(line)
        if m and res is not None:
            res.update(search_steps=int(m.group(1)), committed=float(m.group(2)), note=m.group(4) or "")
    return res


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--runs", default="runs/noharm")
    ap.add_argument("--seeds", default="2,3,4,5")
    ap.add_argument("--sweep-seed", type=int, default=1)
    ap.add_argument("--np", type=int, default=2)
    ap.add_argument("--python", default=".venv/bin/python")
    ap.add_argument("--hdet", default="bin/hdet")
    ap.add_argument("--far-seeds", default="2,3", help="the seeds of the runs from 10x below and 10x above")
    ap.add_argument("--plan", default="at,nosearch,far", help="which groups, in order")
    ap.add_argument("--kinds", default="hdet,probe,nosearch", help="which hdet rows to run (the plain runs always)")
    ap.add_argument("--table", action="store_true", help="only print the table of the results there are")
    args = ap.parse_args()
    done = Results(args.runs)
    seeds = [int(s) for s in args.seeds.split(",")]
    far = [int(s) for s in args.far_seeds.split(",")]
    if args.table:
        table(done, args.sweep_seed)
        return
    todo = [("plain", lr, args.sweep_seed) for lr in SWEEP] + [("plain", lr, s) for s in seeds for lr in SWEEP]
    groups = {"at": [("hdet", 3e-3, s) for s in seeds] + [("probe", 3e-3, s) for s in seeds[:2]],
              "nosearch": [("nosearch", 3e-3, s) for s in seeds],
              "far": [(k, lr, s) for s in far for lr in (3e-4, 3e-2) for k in ("hdet", "probe")]}
    kinds = args.kinds.split(",")
    for g in args.plan.split(","):
        todo += [t for t in groups[g] if t[0] in kinds]
    for kind, lr, seed in todo:
        if (kind, lr, seed) in done:
            continue
        r = run_one(args, kind, lr, seed)
        r.update(kind=kind, lr=lr, seed=seed)
        print(json.dumps(done.add(r)), flush=True)
    # plain training at what hdet committed, in one process (cheap): the commit as a user would write it
    for (kind, lr, seed), r in list(done.items()):
        if kind in ("hdet", "probe") and ("plainat", lr * r["committed"], seed) not in done and r.get("committed"):
            q = run_one(args, "plain", lr * r["committed"], seed)
            q.update(kind="plainat", lr=lr * r["committed"], seed=seed, start=lr, of=kind)
            done.add(q)
    table(done, args.sweep_seed)


def table(done, sweep_seed):
    """Markdown: each row's final validation MSE against plain training at the start on the same seed, and
    against the sweep's best rate (chosen on sweep_seed), median (worst) over the held-out seeds it has."""
    sweep = {lr: r["val_mse"] for (k, lr, s), r in done.items() if k == "plain" and s == sweep_seed}
    best = min(sweep, key=sweep.get)
    plain = {(lr, s): r["val_mse"] for (k, lr, s), r in done.items() if k == "plain"}
    print("sweep on seed %d: %s; best lr %g" % (sweep_seed, ", ".join("%g: %.4f" % kv for kv in sorted(sweep.items())), best))
    print("| row | start | seeds | val MSE (median) | vs plain at the start: median (worst) | vs plain at the sweep's best | committed |")
    print("|---|---|---|---:|---:|---:|---|")
    rows = {}
    for (k, lr, s), r in done.items():
        if k in ("plain", "plainat") or s == sweep_seed:
            continue
        rows.setdefault((k, lr), []).append((s, r))
    for (k, lr), rs in sorted(rows.items(), key=lambda kv: (kv[0][1], kv[0][0])):
        rs.sort(key=lambda sr: sr[0])
        vs_start = [100 * (r["val_mse"] / plain[(lr, s)] - 1) for s, r in rs]
        vs_best = [100 * (r["val_mse"] / plain[(best, s)] - 1) for s, r in rs if (best, s) in plain]
        committed = ", ".join("x%.3g%s" % (r.get("committed", 1), " kept" if r.get("note") else "") for s, r in rs)
        print("| %s | %g | %s | %.4f | %+.1f %% (%+.1f %%) | %+.1f %% | %s |" % (
            k, lr, ",".join(str(s) for s, _ in rs), statistics.median(r["val_mse"] for _, r in rs),
            statistics.median(vs_start), max(vs_start), statistics.median(vs_best) if vs_best else float("nan"),
            committed if k != "nosearch" else "-"))


if __name__ == "__main__":
    main()
