"""Issue 39's comparison: hdet against the tools a user would pick instead of it.

    .venv/bin/python bench/peers/run.py --setups mlp-adamw,mlp-sgd,convnet-adamw,hf [--heldout 4,5] [--runs runs/peers]

Per setup: a plain max_lr sweep (log-spaced, 3 points a decade) on the sweep
seed picks the best point; then on each held-out seed, from 10x below, at and
10x above it: (a) plain training at the start, (b) torch-lr-finder's range
test and plain training at its suggestion, (c) Prodigy, (d) Schedule-Free at
the start's rate, (e) D-Adaptation, (f) plain training at the sweep's best
point (the reference), (g) hdet with a probe and (h) hdet with nothing added
(`mpirun -np 4 hdet run --worker -- python SCRIPT --hdet [--probe]`), and
plain training at what each hdet run committed (one process, what hdet
prints to write into the script), and issue 51's like-for-like rows: (i)
the same ranks without the search at the start (hdet's ranks, spread 0,
the search off: `--hdet --same-ranks`), at the best start the same ranks
at the sweep's best, and (j) the same ranks at lr_find's suggestion. Every run's command and result are kept
under RUNS/SETUP/ (NAME.json; hdet's run directory NAME/); a finished run
whose command has not changed is reused, so an interrupted study resumes.
Two plain runs and one hdet run (4 ranks) go at once (--jobs). At the end
the markdown tables go to stdout (and RUNS/peers.md).
"""

import argparse
import concurrent.futures as cf
import importlib.metadata
import json
import math
import os
import platform
import shutil
import statistics
import subprocess
import sys
import threading
import time

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(os.path.dirname(HERE))


def grid(k_from, k_to):
    """10^(k/3) rounded to 2 significant digits, as hdetbench's grid."""
    return [float("%.2g" % 10 ** (k / 3)) for k in range(k_from, k_to + 1)]


# Each setup: its script and arguments, the sweep's grid, the steps of one
# run, the loss (a key of the script's JSON line) and the peers' flags.
SETUPS = {
    "mlp-adamw": dict(label="MLP + AdamW", script="bench/peers/mlp.py", args=["--optimizer", "adamw"],
                      grid=grid(-11, -4), loss="test_loss", loss_name="test loss"),
    "mlp-sgd": dict(label="MLP + SGD m=0.9", script="bench/peers/mlp.py", args=["--optimizer", "sgd"],
                    grid=grid(-7, 0), loss="test_loss", loss_name="test loss"),
    "convnet-adamw": dict(label="ConvNet + AdamW", script="bench/peers/mlp.py",
                          args=["--model", "convnet", "--optimizer", "adamw"], shared="shared-convnet",
                          grid=grid(-9, -2), loss="test_loss", loss_name="test loss"),
    "hf": dict(label="Hugging Face Trainer (GPT-2, cosine)", script="bench/peers/hf_peer.py", args=[],
               grid=grid(-10, -3), loss="test_loss", loss_name="test loss per byte"),
    "gpt": dict(label="GPT (byte-level, cosine)", script="bench/peers/gpt_peer.py", args=[],
                grid=grid(-10, -3), loss="val_bpb", loss_name="validation bits per byte"),
}
# Peers whose run does not depend on the start (their own rate, or their own
# range test); their runs are shared by every start.
START_FREE = {"lrfind", "prodigy", "dadapt"}
# Arguments a peer ignores, left out of its command so setups share its runs.
IGNORES = {"prodigy": {"--optimizer"}}

# hdet's runs: with a probe, the attach line alone, and the same ranks
# without the search (spread 0, the search off).
KINDS = {"hdet-probe": ["--hdet", "--probe"], "hdet": ["--hdet"], "same": ["--hdet", "--same-ranks"]}

PEER_ROWS = [
    ("plain", "(a) plain at the start"),
    ("lrfind", "(b) lr_find (torch-lr-finder), then plain at its suggestion"),
    ("prodigy", "(c) Prodigy (lr 1.0, same schedule)"),
    ("schedulefree", "(d) Schedule-Free at the start's lr"),
    ("dadapt", "(e) D-Adaptation (lr 1.0, same schedule)"),
]


class Runner:
    def __init__(self, opts):
        self.o = opts
        self.lock = threading.Lock()
        self.path_locks = {}
        self.plain_pool = cf.ThreadPoolExecutor(opts.jobs)
        self.hdet_pool = cf.ThreadPoolExecutor(1)
        self.started = time.time()

    def log(self, msg):
        with self.lock:
            print("[%6.0fs] %s" % (time.time() - self.started, msg), file=sys.stderr, flush=True)

    def script_cmd(self, setup, peer, lr, seed, extra=()):
        s = SETUPS[setup]
        args = list(s["args"])
        for flag in IGNORES.get(peer, ()):
            if flag in args:
                i = args.index(flag)
                del args[i:i + 2]
        cmd = [self.o.python, s["script"], "--peer", peer, "--seed", str(seed), *args, *extra]
        if peer not in START_FREE:
            cmd += ["--max-lr", "%.4g" % lr]
        return cmd

    def path(self, setup, name, peer=""):
        """RUNS/SETUP/NAME; a peer that ignores the setup's arguments (Prodigy
        ignores --optimizer) keeps its runs in RUNS/shared-SCRIPT/ (or the
        setup's own shared folder), one for every setup of the same model."""
        if peer in IGNORES:
            s = SETUPS[setup]
            setup = s.get("shared") or "shared-" + os.path.splitext(os.path.basename(s["script"]))[0]
        return os.path.join(self.o.runs, setup, name)

    def _cached(self, path, cmd):
        try:
            with open(path + ".json") as f:
                rec = json.load(f)
        except (OSError, ValueError):
            return None
        # A run that crashed (not one that diverged: that is a result) is run
        # again; --table-only shows it as it ended.
        ok = rec.get("cmd") == cmd and "result" in rec and (self.o.table_only or not rec["result"].get("failed"))
        return rec if ok else None

    def _save(self, path, rec):
        os.makedirs(os.path.dirname(path), exist_ok=True)
        tmp = path + ".json.tmp"
        with open(tmp, "w") as f:
            json.dump(rec, f, indent=1)
        os.replace(tmp, path + ".json")

    def plain(self, setup, name, peer, lr, seed):
        """One single-process run (a plain run or a one-run peer); its JSON record."""
        path = self.path(setup, name, peer)
        with self.lock:  # the same run asked for twice (a shared peer, the reference) runs once
            mine = self.path_locks.setdefault(path, threading.Lock())
        with mine:
            return self._plain(setup, name, peer, lr, seed, path)

    def _plain(self, setup, name, peer, lr, seed, path):
        cmd = self.script_cmd(setup, peer, lr, seed)
        rec = self._cached(path, cmd)
        if rec or self.o.table_only:
            return rec
        t0 = time.time()
        p = subprocess.run(cmd, cwd=ROOT, capture_output=True, text=True)
        wall = time.time() - t0
        result = last_json(p.stdout)
        if p.returncode != 0 or result is None:
            result = {"failed": True, "rc": p.returncode, "tail": (p.stdout + p.stderr)[-2000:]}
        rec = {"cmd": cmd, "result": result, "wall_s": round(wall, 1)}
        self._save(path, rec)
        self.log("%s %s: %s in %.0f s" % (setup, name, fmt_loss(result.get(SETUPS[setup]["loss"])), wall))
        return rec

    def hdet(self, setup, name, lr, seed, kind):
        """One hdet run of the script (KINDS: with --hdet, and --probe or
        --same-ranks); its record with the commit."""
        extra = KINDS[kind]
        cmd = self.script_cmd(setup, "plain", lr, seed, extra)
        path = self.path(setup, name)
        rec = self._cached(path, cmd)
        if rec or self.o.table_only:
            return rec
        shutil.rmtree(path, ignore_errors=True)
        full = ["mpirun", "-np", str(self.o.np), "--oversubscribe", "--bind-to", "none", self.o.hdet, "run",
                "--run-dir", path, "--progress", "none", "--worker", "--", *cmd]
        env = dict(os.environ, OMPI_ALLOW_RUN_AS_ROOT="1", OMPI_ALLOW_RUN_AS_ROOT_CONFIRM="1")
        t0 = time.time()
        p = subprocess.run(full, cwd=ROOT, capture_output=True, text=True, env=env)
        wall = time.time() - t0
        os.makedirs(path, exist_ok=True)
        with open(os.path.join(path, "output.log"), "w") as f:
            f.write(p.stdout + p.stderr)
        result = last_json(p.stdout, prefix="[rank 0] ")
        commit = read_commit(os.path.join(path, "metrics.jsonl"))
        if p.returncode != 0 or result is None:
            result = {"failed": True, "rc": p.returncode, "tail": (p.stdout + p.stderr)[-2000:]}
        shutil.rmtree(os.path.join(path, "checkpoints"), ignore_errors=True)
        rec = {"cmd": cmd, "launch": full, "result": result, "commit": commit, "wall_s": round(wall, 1)}
        self._save(path, rec)
        self.log("%s %s: %s, commit %s, in %.0f s" % (setup, name, fmt_loss(result.get(SETUPS[setup]["loss"])),
                                                      commit and "x%.3g" % commit["value"], wall))
        return rec


def last_json(text, prefix=""):
    for line in reversed(text.splitlines()):
        if prefix:
            if not line.startswith(prefix):
                continue
            line = line[len(prefix):]
        line = line.strip()
        if line.startswith("{") and line.endswith("}"):
            try:
                return json.loads(line)
            except ValueError:
                continue
    return None


def read_commit(path):
    try:
        with open(path) as f:
            for line in f:
                if '"commit"' in line:
                    rec = json.loads(line)
                    if rec.get("type") == "commit":
                        lr = rec["committed"]["lr"]
                        return {"value": lr["value"], "peak_lr": lr["peak_lr"], "search_steps": rec["step"]}
    except (OSError, ValueError, KeyError):
        pass
    return None


def fmt_loss(v):
    return "failed" if v is None else ("%.4f" % v)


def loss_of(rec, key):
    """The run's loss, inf when it failed or diverged (NaN), None when it was not run."""
    if rec is None:
        return None
    v = rec["result"].get(key)
    if v is None or (isinstance(v, float) and (math.isnan(v) or math.isinf(v))):
        return math.inf
    return v


def study(r, setup, opts):
    s = SETUPS[setup]
    key = s["loss"]
    seed0 = opts.sweep_seed
    # The sweep, on the sweep seed.
    futs = {lr: r.plain_pool.submit(r.plain, setup, "sweep/seed%d-lr%.4g" % (seed0, lr), "plain", lr, seed0)
            for lr in s["grid"]}
    sweep = {lr: f.result() for lr, f in futs.items()}
    done = [lr for lr in sweep if sweep[lr] is not None]
    if not done:
        raise SystemExit("%s: no sweep run finished" % setup)
    best = min(done, key=lambda lr: loss_of(sweep[lr], key))
    edge = best in (s["grid"][0], s["grid"][-1])
    r.log("%s: the sweep's best point %.4g%s" % (setup, best, " (at the grid's edge)" if edge else ""))
    starts = [("10x below", float("%.4g" % (best / 10))), ("at best", best), ("10x above", float("%.4g" % (best * 10)))]

    plain_f, hdet_f, commit_f = {}, {}, {}
    for seed in opts.heldout:
        plain_f[("ref", seed)] = r.plain_pool.submit(r.plain, setup, "seed%d/plain-lr%.4g" % (seed, best), "plain", best, seed)
        for peer, _ in peer_rows(opts):
            for _, lr in starts:
                if peer in START_FREE:
                    name = "seed%d/%s" % (seed, peer)
                else:
                    name = "seed%d/%s-lr%.4g" % (seed, peer, lr)
                k = (peer, seed) if peer in START_FREE else (peer, seed, lr)
                if k not in plain_f:
                    plain_f[k] = r.plain_pool.submit(r.plain, setup, name, peer, lr, seed)
    # hdet runs one at a time, at the best start first; each one's commit,
    # trained plain, goes to the plain pool when it is known.
    order = [starts[1], starts[0], starts[2]]
    for seed in opts.heldout:
        for _, lr in order:
            for kind in KINDS:

                def job(seed=seed, lr=lr, kind=kind):
                    rec = r.hdet(setup, "seed%d/%s-lr%.4g" % (seed, kind, lr), lr, seed, kind)
                    c = kind != "same" and rec and rec.get("commit")
                    if c and setup in opts.commits:
                        clr = float("%.4g" % (lr * c["value"]))
                        commit_f[(kind, seed, lr)] = r.plain_pool.submit(
                            r.plain, setup, "seed%d/commit-%s-lr%.4g" % (seed, kind, lr), "plain", clr, seed)
                    return rec
                hdet_f[(kind, seed, lr)] = r.hdet_pool.submit(job)
        if ("lrfind", seed) in plain_f:
            hdet_f[("same-lrfind", seed)] = r.hdet_pool.submit(same_at_suggestion, r, setup, seed, plain_f[("lrfind", seed)])
    plain_r = {k: f.result() for k, f in plain_f.items()}
    hdet_r = {k: f.result() for k, f in hdet_f.items()}
    commit_r = {k: f.result() for k, f in list(commit_f.items())}
    return dict(setup=setup, best=best, edge=edge, starts=starts, sweep=sweep, plain=plain_r, hdet=hdet_r,
                commit=commit_r)


def same_at_suggestion(r, setup, seed, lrfind_f):
    """(j): the same ranks without the search at lr_find's suggestion (once its range test has run)."""
    rec = lrfind_f.result()
    lr = rec and rec["result"].get("lr_used")
    if not lr:
        return None
    return r.hdet(setup, "seed%d/same-lrfind" % seed, float("%.4g" % lr), seed, "same")


def peer_rows(opts):
    return [(peer, label) for peer, label in PEER_ROWS if peer in opts.peers]


def rel_cell(values, want):
    """'median (worst)' of relative changes over the seeds run; inf is a
    diverged or failed run; fewer seeds than want are named."""
    if not values:
        return "not run"

    def f(v):
        return "diverged" if v == math.inf else "the other diverged" if v == -math.inf else "%+.1f %%" % (100 * v)
    cell = "%s (%s)" % (f(statistics.median(values)), f(max(values)))
    return cell if len(values) == want else cell + " [%d seed%s]" % (len(values), "s" * (len(values) > 1))


def pct(v):
    return "not run" if v is None else "diverged" if math.isinf(v) else "%+.1f %%" % (100 * v)


def table(res, opts):
    s = SETUPS[res["setup"]]
    key = s["loss"]
    seeds = opts.heldout
    ref = {seed: loss_of(res["plain"][("ref", seed)], key) for seed in seeds}
    steps = next(r for r in res["sweep"].values() if r)["result"].get("steps", 0)
    starts = res["starts"]
    out = ["**%s** (`--setups %s`): the sweep's best max_lr %.4g on seed %d%s; held-out seeds %s; %s steps a run. "
           "Final %s against plain training at the best point on the same seed, median (worst) over the "
           "held-out seeds; compute in plain runs (one process, the same steps)."
           % (s["label"], res["setup"], res["best"], opts.sweep_seed,
              " (at the grid's edge: the best may lie outside it)" if res["edge"] else "",
              ", ".join(map(str, seeds)), steps, s["loss_name"]), ""]
    out.append("| row | " + " | ".join("%s (%.3g)" % (n, lr) for n, lr in starts) + " | compute (plain runs) |")
    out.append("|---|" + "---:|" * len(starts) + "---|")
    medians = {}

    def rels(recs):
        """(seed, relative loss) for the seeds whose run and reference exist."""
        got = []
        for seed, rec in recs:
            v = loss_of(rec, key)
            if v is None or ref[seed] is None:
                continue
            got.append(math.inf if math.isinf(v) or math.isinf(ref[seed]) else v / ref[seed] - 1)
        return got

    for peer, label in peer_rows(opts):
        cells, comp, used = [], [], set()
        for _, lr in starts:
            recs = [(seed, res["plain"][(peer, seed) if peer in START_FREE else (peer, seed, lr)]) for seed in seeds]
            vals = rels(recs)
            medians[(peer, lr)] = statistics.median(vals) if vals else None
            cells.append(rel_cell(vals, len(seeds)))
            for seed, rec in recs:
                if rec and rec["result"].get("steps"):
                    comp.append(1 + rec["result"].get("extra_steps", 0) / rec["result"]["steps"])
                    if peer in START_FREE and "lr_used" in rec["result"]:
                        used.add((seed, rec["result"]["lr_used"]))
        extra = ""
        if used:
            extra = "; %s %s" % ("suggested max_lr" if peer == "lrfind" else "adapted peak lr (d x 1.0)",
                                 ", ".join("%.3g" % v for _, v in sorted(used)))
        cost = "%.2f" % statistics.median(comp) if comp else "-"
        out.append("| %s | %s | %s%s |" % (label, " | ".join(cells), cost, extra))
    out.append("| (f) the sweep's best point (reference) | %s | %d (the sweep) |"
               % (" | ".join(["0"] * len(starts)), len(res["sweep"])))
    for kind, label in (("hdet-probe", "(g) hdet with a probe"), ("hdet", "(h) hdet with nothing added")):
        cells, ccells, comp, commits = [], [], [], []
        for _, lr in starts:
            recs = [(seed, res["hdet"][(kind, seed, lr)]) for seed in seeds]
            vals = rels(recs)
            medians[(kind, lr)] = statistics.median(vals) if vals else None
            cells.append(rel_cell(vals, len(seeds)))
            for _, rec in recs:
                c = rec and rec.get("commit")
                if c and rec["result"].get("steps"):
                    comp.append(opts.np * (1 + c["search_steps"] / rec["result"]["steps"]))
                    commits.append(lr * c["value"] / res["best"])
            ccells.append(rel_cell(rels([(seed, res["commit"].get((kind, seed, lr))) for seed in seeds]), len(seeds)))
        cost = "%.2f" % statistics.median(comp) if comp else "-"
        out.append("| %s | %s | %s (%d ranks x (1 + search share)) |" % (label, " | ".join(cells), cost, opts.np))
        out.append("| %s's commit, trained plain | %s | 1 on top (committed max_lr / best: %s) |"
                   % (label[:3], " | ".join(ccells), ", ".join("x%.2g" % v for v in sorted(commits)) or "-"))
    out += same_rows(res, opts, rels, medians)
    out.append("")
    for name, lr in starts:
        peers = {label.split(" ", 1)[1]: medians[(peer, lr)] for peer, label in peer_rows(opts)
                 if medians[(peer, lr)] is not None}
        if not peers:
            continue
        best_peer = min(peers, key=peers.get)
        for kind, label in (("hdet-probe", "hdet + probe"), ("hdet", "hdet alone")):
            h = medians[(kind, lr)]
            if h is None:
                continue
            verdict = "ahead of" if h < peers[best_peer] else "behind"
            out.append("- %s, %s: %s %s, %s the best one-run peer (b-e), %s, %s."
                       % (s["label"], name, label, pct(h), verdict, best_peer, pct(peers[best_peer])))
    out.append("")

    def wall(recs):
        recs = [r for r in recs if r]
        return "%.0f s" % statistics.median([r["wall_s"] for r in recs]) if recs else "-"
    out.append("Wall time per run (median, this machine under load): plain %s, hdet %s."
               % (wall([v for k, v in res["plain"].items() if k[0] == "plain"]), wall(res["hdet"].values())))
    out.append("")
    out.append("Sweep on seed %d (%s): %s." % (opts.sweep_seed, s["loss_name"], ", ".join(
        "%.3g: %s" % (lr, pct(None) if rec is None else "diverged" if math.isinf(loss_of(rec, key))
                      else "%.4f" % loss_of(rec, key)) for lr, rec in sorted(res["sweep"].items()))))
    return "\n".join(out)


def same_rows(res, opts, rels, medians):
    """The like-for-like rows (i), (j) of the table, then what the search adds
    over the same ranks and what hdet adds over a peer's pick on them."""
    seeds, starts, sr = opts.heldout, res["starts"], res["hdet"]
    cells = []
    for _, lr in starts:
        vals = rels([(seed, sr.get(("same", seed, lr))) for seed in seeds])
        medians[("same", lr)] = statistics.median(vals) if vals else None
        cells.append(rel_cell(vals, len(seeds)))
    out = ["| (i) the same ranks without the search, at the start (at the best start: the sweep's best on them) | %s "
           "| %d (the ranks) |" % (" | ".join(cells), opts.np)]
    lf = rel_cell(rels([(seed, sr.get(("same-lrfind", seed))) for seed in seeds]), len(seeds))
    out.append("| (j) the same ranks at lr_find's suggestion | %s | %d + the range test |"
               % (" | ".join([lf] * len(starts)), opts.np))
    key = SETUPS[res["setup"]]["loss"]

    def vs(kind, lr, other):
        got = []
        for seed in seeds:
            a, b = loss_of(sr.get((kind, seed, lr)), key), loss_of(sr.get(other(seed)), key)
            if a is not None and b is not None:  # -inf: hdet trained, the other diverged
                got.append(math.inf if math.isinf(a) else -math.inf if math.isinf(b) else a / b - 1)
        return rel_cell(got, len(seeds))
    out += ["", "Like for like (the same %d ranks): hdet's final %s against (i) the same ranks without the search "
            "at the start (what the search adds), (j) them at lr_find's suggestion and the same ranks at the sweep's "
            "best, median (worst) over the held-out seeds." % (opts.np, SETUPS[res["setup"]]["loss_name"]), "",
            "| start | hdet + probe vs (i) | hdet alone vs (i) | hdet + probe vs (j) | hdet alone vs (j) "
            "| hdet + probe vs the sweep's best | hdet alone vs the sweep's best |", "|---|" + "---:|" * 6]
    best = res["best"]
    for name, lr in starts:
        row = [vs(k, lr, lambda seed, lr=lr: ("same", seed, lr)) for k in ("hdet-probe", "hdet")]
        row += [vs(k, lr, lambda seed: ("same-lrfind", seed)) for k in ("hdet-probe", "hdet")]
        row += [vs(k, lr, lambda seed: ("same", seed, best)) for k in ("hdet-probe", "hdet")]
        out.append("| %s | %s |" % (name, " | ".join(row)))
    return out


def versions():
    names = ["torch", "prodigyopt", "schedulefree", "dadaptation", "torch-lr-finder", "transformers", "numpy"]
    got = []
    for n in names:
        try:
            got.append("%s %s" % (n, importlib.metadata.version(n)))
        except importlib.metadata.PackageNotFoundError:
            got.append("%s missing" % n)
    return "Python %s; %s" % (platform.python_version(), ", ".join(got))


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--setups", default="mlp-adamw,mlp-sgd,convnet-adamw,hf", help="comma-separated, of " + ",".join(SETUPS))
    ap.add_argument("--sweep-seed", type=int, default=1)
    ap.add_argument("--heldout", default="4,5")
    ap.add_argument("--runs", default="runs/peers")
    ap.add_argument("--hdet", default="bin/hdet")
    ap.add_argument("--python", default=".venv/bin/python")
    ap.add_argument("--np", type=int, default=4)
    ap.add_argument("--jobs", type=int, default=2, help="plain runs at once (besides one hdet run)")
    ap.add_argument("--peers", default=",".join(p for p, _ in PEER_ROWS),
                    help="the one-run peers run (lrfind is also what row (j) needs)")
    ap.add_argument("--commits", default="",
                    help="the setups whose hdet commits are also trained plain (default: every setup run)")
    ap.add_argument("--table-only", action="store_true",
                    help="run nothing: the tables from the runs already kept (a run not kept shows as not run)")
    opts = ap.parse_args()
    opts.heldout = [int(x) for x in opts.heldout.split(",")]
    opts.commits = (opts.commits or opts.setups).split(",")
    opts.peers = opts.peers.split(",")
    for name in opts.peers:
        if name not in dict(PEER_ROWS):
            ap.error("unknown peer %r; the peers are %s" % (name, ",".join(p for p, _ in PEER_ROWS)))
    opts.hdet = os.path.abspath(opts.hdet) if os.sep in opts.hdet else opts.hdet
    for name in opts.setups.split(","):
        if name not in SETUPS:
            ap.error("unknown setup %r" % name)
    r = Runner(opts)
    print("Versions: %s." % versions(), file=sys.stderr, flush=True)
    md = ["Versions: %s; %s (`%s version`)." % (versions(), hdet_version(opts.hdet), opts.hdet), ""]
    # The setups' studies overlap: each submits its runs to the shared pools
    # (two plain runs and one hdet run at a time) as soon as it can, the
    # first setup's first, so the plain slots work on the next setup's runs
    # while the hdet runs of the one before go on.
    names = opts.setups.split(",")
    t0 = time.time()
    with cf.ThreadPoolExecutor(len(names)) as ex:
        futs = []
        for name in names:
            futs.append(ex.submit(study, r, name, opts))
            time.sleep(1)
        for name, f in zip(names, futs):
            md.append(table(f.result(), opts))
            md.append("")
            md.append("%s done %.0f min after the start (runs reused from earlier invocations cost nothing)."
                      % (name, (time.time() - t0) / 60))
            md.append("")
            print("\n".join(md[-4:]), file=sys.stderr, flush=True)
    os.makedirs(opts.runs, exist_ok=True)
    with open(os.path.join(opts.runs, "peers.md"), "w") as f:
        f.write("\n".join(md) + "\n")
    print("\n".join(md))
    r.plain_pool.shutdown()
    r.hdet_pool.shutdown()


def hdet_version(path):
    try:
        return subprocess.run([path, "version"], capture_output=True, text=True, timeout=30).stdout.strip() or "?"
    except OSError:
        return "?"


if __name__ == "__main__":
    main()
