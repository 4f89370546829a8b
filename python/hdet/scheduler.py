"""hdet.OneCycleLR: torch's OneCycleLR, plus hdet's per-rank values under hdet."""

import math
import time

import torch
from torch.optim.lr_scheduler import OneCycleLR as _TorchOneCycleLR

from . import _args, _loss, _session

_probe_fn = None


def probe(fn):
    """Give hdet a probe function for the `probe` signal (docs/design.md §1.1).

    fn() -> float evaluates the current model, in eval mode and without
    gradients, on fixed examples (the same on every rank; e.g. 1024 training
    examples drawn with a fixed seed). hdet calls it at the end of windows on
    the average of the window's last iterates and compares the ranks' answers.
    Call it before constructing the scheduler (or pass probe= to it). Without
    it hdet uses each rank's training loss (`signal: train`). Outside hdet it
    does nothing."""
    global _probe_fn
    if fn is not None and not callable(fn):
        raise TypeError("hdet.probe: %r is not callable" % (fn,))
    _probe_fn = fn
    return fn


def dropout_setter(module):
    """A callback that sets p on every dropout layer of module, for
    dropout_callback=."""
    layers = [m for m in module.modules() if isinstance(m, torch.nn.modules.dropout._DropoutNd)]
    if not layers:
        raise ValueError("hdet: %s has no dropout layer" % type(module).__name__)

    def set_p(p):
        for m in layers:
            m.p = p

    return set_p


def _group_keys(groups):
    return [str(g.get("name", i)) for i, g in enumerate(groups)]


def _setters(optimizer, callbacks):
    """name -> function(value) that applies value and returns what the
    optimizer (or the callback) now holds for the reference group.

    "lr" sets every group, keeping each group's max_lr ratio to the first
    group; "weight_decay" sets the groups that had a non-zero weight decay
    (no-decay groups stay at 0); "momentum" is SGD's momentum or Adam's beta1;
    "lr/KEY" and "weight_decay/KEY" address one group (KEY: its "name" entry,
    else its index)."""
    groups = optimizer.param_groups
    s = {}
    ref = groups[0].get("max_lr", groups[0]["lr"])
    ratios = [1.0 if ref == 0 else g.get("max_lr", g["lr"]) / ref for g in groups]

    def set_lr(v):
        for g, r in zip(groups, ratios):
            g["lr"] = v * r
        return groups[0]["lr"]

    s["lr"] = set_lr
    if "weight_decay" in groups[0]:
        decayed = [g for g in groups if g["weight_decay"] > 0] or list(groups)

        def set_wd(v):
            for g in decayed:
                g["weight_decay"] = v
            return decayed[0]["weight_decay"]

        s["weight_decay"] = set_wd
    if "betas" in groups[0]:
        def set_momentum(v):
            for g in groups:
                g["betas"] = (v, g["betas"][1])
            return groups[0]["betas"][0]

        s["momentum"] = set_momentum
    elif "momentum" in groups[0]:
        def set_momentum(v):
            for g in groups:
                g["momentum"] = v
            return groups[0]["momentum"]

        s["momentum"] = set_momentum
    if len(groups) > 1:
        for key, g in zip(_group_keys(groups), groups):
            s["lr/" + key] = _set_key(g, "lr")
            if "weight_decay" in g:
                s["weight_decay/" + key] = _set_key(g, "weight_decay")
    for name, fn in callbacks.items():
        if name in s:
            raise ValueError("hdet: callback %r would replace the built-in hyperparameter of that name" % name)
        if not callable(fn):
            raise TypeError("hdet: callback for %r is not callable" % name)
        s[name] = _call(fn)
    return s


def _set_key(group, key):
    def set_value(v):
        group[key] = v
        return group[key]

    return set_value


def _call(fn):
    def set_value(v):
        fn(v)
        return v

    return set_value


def _per_group(value, n):
    if isinstance(value, (list, tuple)):
        return [float(x) for x in value]
    return [float(value)] * n


class OneCycleLR(_TorchOneCycleLR):
    """torch.optim.lr_scheduler.OneCycleLR, for running under hdet.

    Every OneCycleLR argument means what it means in torch. Outside hdet
    (no HDET_SOCKET in the environment) this class is torch's OneCycleLR:
    the same values at every step, the same state_dict. step(loss) is the
    only call a training loop needs; outside hdet the loss is ignored.

    Under `hdet run --worker`, the constructor connects to this rank's hdet
    process and waits for the first window's plan; each step(loss) records
    the loss, lets torch compute the schedule, then overrides the explored
    hyperparameters with this rank's planned values for the next step; at
    the end of each window it hands the parameters over (hdet averages them
    across ranks) and loads the average back before the next step.

    hdet arguments (keyword only). Each is checked at construction, inside
    or outside hdet (a wrong type raises TypeError, a wrong value
    ValueError, naming the argument), and each changes the run under hdet:
      hdet_window: int in [1, total_steps]: the window length T in steps
        (train.window). Default: the config's train.window, else 50.
      hdet_alpha: number >= 0: the spread width of every explored
        hyperparameter (its explorer's spread.alpha; below 1 for a
        multiplicative spread). Default: the explorer's (lr: 0.5).
      hdet_spread: "multiplicative", "additive" or "geometric": the spread
        kind of every explored hyperparameter (spread.kind). Default: the
        explorer's (lr multiplicative, dropout additive, weight_decay
        geometric).
      hdet_auto: dict, the lr explorer's auto block (explore must hold
        "lr"): enabled (bool), form ("offset" or "paper"), start (int, a
        step), until (fraction of the run), guard, clip, sigma, beta, lambda
        (numbers), signal ("probe" or "train"), estimator ("quadratic" or
        "softmax"), sigma_mode ("absolute" or "relative"), commit
        ("restart": a search pass, then a main pass at the committed value;
        "continue": one pass). Other keys, and the removed "decay", are
        refused; hdet checks the ranges when the run starts (exit 2). The
        repository's README documents each key.
      explore: a list of hyperparameters to explore: names, or dicts with
        "name" and any of: alpha and spread (this one's spread.alpha and
        spread.kind, in place of hdet_alpha and hdet_spread), lower and
        upper (its bounds: values are clamped to them), base (its constant
        base value, for a name other than lr, whose base is this
        OneCycleLR; the built-in dropout and weight_decay explorers need it
        unless the config gives their schedule), plugin (the explorer
        binary, for a name other than lr, dropout and weight_decay). Other
        keys are refused. Default: "lr", plus "dropout" when
        dropout_callback is given.
    The script is the run's configuration: a config file (or --set) may add
    what these leave out, but where it sets the same value differently
    (train.window and hdet_window, a key of an explorers entry's spread,
    bounds, auto or schedule and the script's) hdet exits 2 naming both,
    unless that explorers entry says `override: true`: then the config's
    value wins, and hdet logs it. train.window has no override.

    Other keyword arguments:
      dropout_callback: function(p) that sets the model's dropout
        (hdet.dropout_setter(model) does it for nn.Dropout layers).
      callbacks: {name: function(value)} for any other scalar.
      evaluate: function() -> (test loss, accuracy), for hdet's evaluations.
      probe: function() -> loss on fixed examples (see hdet.probe).

    Under hdet step() needs no argument: the step's loss is what the script
    called .backward() on since the previous step (summed over several
    backward calls; unscaled when AMP's GradScaler scaled it). step(loss)
    gives it explicitly. get_last_lr() is the rate this rank applies;
    state_dict() pickles and loads into torch's OneCycleLR without hdet.
    """

    def __init__(self, optimizer, max_lr, total_steps=None, epochs=None, steps_per_epoch=None,
                 pct_start=0.3, anneal_strategy="cos", cycle_momentum=True, base_momentum=0.85,
                 max_momentum=0.95, div_factor=25.0, final_div_factor=1e4, three_phase=False,
                 last_epoch=-1, verbose=False, *, hdet_window=None, hdet_alpha=None,
                 hdet_spread=None, hdet_auto=None, explore=None, dropout_callback=None,
                 callbacks=None, evaluate=None, probe=None):
        self._hdet_run = None  # first: torch's constructor calls step()
        super().__init__(optimizer, max_lr, total_steps=total_steps, epochs=epochs,
                         steps_per_epoch=steps_per_epoch, pct_start=pct_start,
                         anneal_strategy=anneal_strategy, cycle_momentum=cycle_momentum,
                         base_momentum=base_momentum, max_momentum=max_momentum,
                         div_factor=div_factor, final_div_factor=final_div_factor,
                         three_phase=three_phase, last_epoch=last_epoch, verbose=verbose)
        callbacks = dict(callbacks or {})
        if dropout_callback is not None:
            callbacks["dropout"] = dropout_callback
        setters = _setters(optimizer, callbacks)
        if explore is None:
            explore = ["lr"] + (["dropout"] if "dropout" in callbacks else [])
        hdet_window = _args.window(hdet_window, self.total_steps)
        options = {k: v for k, v in (("alpha", _args.alpha("hdet_alpha", hdet_alpha)),
                                     ("spread", _args.spread("hdet_spread", hdet_spread)),
                                     ("auto", _args.auto(hdet_auto))) if v is not None}
        explore = _args.explore(explore, setters, "auto" in options)
        if evaluate is not None and not callable(evaluate):
            raise TypeError("hdet: evaluate is not callable")
        probe = probe if probe is not None else _probe_fn
        if probe is not None and not callable(probe):
            raise TypeError("hdet: probe is not callable")
        if not _session.under_hdet():
            return
        n = len(optimizer.param_groups)
        hello = {
            "hyperparameters": list(setters),
            "param_groups": [
                {"key": k, "size": sum(p.numel() for p in g["params"]), "lr": g["lr"],
                 "weight_decay": g.get("weight_decay", 0.0)}
                for k, g in zip(_group_keys(optimizer.param_groups), optimizer.param_groups)],
            "device": str(optimizer.param_groups[0]["params"][0].device),
            "schedule": {
                "max_lr": [g["max_lr"] for g in optimizer.param_groups],
                "total_steps": self.total_steps, "pct_start": pct_start,
                "anneal_strategy": anneal_strategy, "cycle_momentum": cycle_momentum,
                "base_momentum": _per_group(base_momentum, n), "max_momentum": _per_group(max_momentum, n),
                "div_factor": div_factor, "final_div_factor": final_div_factor, "three_phase": three_phase,
            },
            "explore": explore,
            "options": options,
            "evaluate": evaluate is not None,
            "probe": probe is not None,
        }
        if hdet_window is not None:
            hello["hdet_window"] = hdet_window
        _loss.install()
        session = _session.Session(optimizer, hello, self.total_steps)
        self._hdet_run = _Run(self, session, setters, evaluate, probe)

    def step(self, loss=None):
        run = self._hdet_run
        if run is None:
            super().step()
            return
        if run.stopped:
            super().step()  # past total_steps: torch's ValueError
            raise _session.Stopped(run.step_num)
        run.record(loss)
        applied = [g["lr"] for g in self.optimizer.param_groups]
        super().step()
        run.advance()
        if run.stopped:  # the run is over: the last applied rate stays
            for g, lr in zip(self.optimizer.param_groups, applied):
                g["lr"] = lr
            self._last_lr = applied

    def state_dict(self):
        """torch's state_dict, without what only this process can hold: the
        hdet connection, and torch 1.x's bound anneal_func (pickling it would
        pickle this object; the loading scheduler keeps its own). Under hdet
        it adds "hdet": this rank's window and last applied values, plain
        data that torch's OneCycleLR loads without hdet."""
        sd = {k: v for k, v in super().state_dict().items() if not k.startswith("_hdet") and k != "anneal_func"}
        if self._hdet_run is not None:
            sd["hdet"] = self._hdet_run.state()
        return sd

    def load_state_dict(self, state_dict):
        sd = {k: v for k, v in state_dict.items() if not k.startswith("_hdet") and k not in ("anneal_func", "hdet")}
        super().load_state_dict(sd)
        if self._hdet_run is not None and "hdet" in state_dict:
            self._hdet_run.load(state_dict["hdet"])


class _Run:
    """The per-step side of a scheduler under hdet."""

    def __init__(self, sched, session, setters, evaluate, probe):
        self.sched = sched
        self.session = session
        self.setters = setters
        self.evaluate = evaluate
        self.probe = probe
        self.step_num = max(sched.last_epoch, 0)  # steps completed
        self.stopped = False
        self._next_window()

    def record(self, loss):
        if loss is None:
            loss = _loss.take()
            if loss is None:
                raise RuntimeError("hdet: no loss for step %d: nothing was .backward()-ed since the last "
                                   "scheduler.step(); call scheduler.step(loss)" % self.step_num)
        else:
            _loss.take()  # the explicit loss replaces what backward recorded
            loss = loss.detach().reshape(()).float() if torch.is_tensor(loss) else torch.tensor(float(loss))
        self.losses.append(loss)

    def advance(self):
        self.step_num += 1
        self.session.step = self.step_num
        i = self.step_num - self.start
        if self.tail and i > self.steps - self.tail:
            self._accumulate(i - (self.steps - self.tail) - 1)
        if i < self.steps:
            self._apply(i)
            return
        t0, window = time.perf_counter(), self.window
        self.session.hand_over()
        probe = self._probe() if self.tail else None
        losses = torch.stack([x.cpu() for x in self.losses]).double().tolist()
        self.session.done(self.window, self.steps, losses, self.applied, probe)
        t1 = time.perf_counter()
        self._next_window()
        # The exchange's cost (for `make bench-pytorch`'s profile): handing
        # over and reporting, then waiting for the plan and loading it.
        self.session.trace(event="exchange", window=window, send_s=t1 - t0,
                           wait_s=time.perf_counter() - t1)

    @torch.no_grad()
    def _accumulate(self, k):
        """Running mean of the parameters over the window's tail."""
        for p, a in zip(self.session.params, self.avg):
            if k == 0:
                a.copy_(p)
            else:
                a.add_(p - a, alpha=1.0 / (k + 1))

    @torch.no_grad()
    def _probe(self):
        """The probe loss of the tail average; the last iterate is restored."""
        params = self.session.params
        saved = [p.detach().clone() for p in params]
        for p, a in zip(params, self.avg):
            p.copy_(a)
        try:
            return float(self.probe())
        finally:
            for p, s in zip(params, saved):
                p.copy_(s)

    def _next_window(self):
        msg = self.session.next_message(self.evaluate)
        if msg is None:
            self.stopped = True
            if self.step_num < self.sched.total_steps:
                raise _session.Stopped(self.step_num)
            return
        start, steps = msg.get("start", 0), msg.get("steps", 0)
        if start != self.step_num:
            self.session.fail("the plan starts at step %d but the script is at step %d" % (start, self.step_num))
        values = msg.get("values") or {}
        for name, vals in values.items():
            if name not in self.setters or len(vals) != steps:
                self.session.fail("bad plan for %r (%d values for %d steps)" % (name, len(vals), steps))
            if not all(math.isfinite(v) for v in vals):
                self.session.fail("non-finite value planned for %r" % name)
        tail = msg.get("probe_tail", 0) if self.probe is not None else 0
        self.window, self.start, self.steps, self.values, self.tail = msg.get("window", 0), start, steps, values, tail
        if tail and not hasattr(self, "avg"):
            self.avg = [torch.empty_like(p) for p in self.session.params]
        self.losses = []
        self.applied = {name: [] for name in values}
        self._apply(0)

    def _apply(self, i):
        for name, vals in self.values.items():
            self.applied[name].append(self.setters[name](vals[i]))
        # get_last_lr() is what this rank applies, not torch's schedule.
        self.sched._last_lr = [g["lr"] for g in self.sched.optimizer.param_groups]

    def state(self):
        return {"rank": self.session.rank, "window": self.window, "step": self.step_num,
                "lr": list(self.sched._last_lr)}

    def load(self, st):
        lr = st.get("lr") if isinstance(st, dict) else None
        if isinstance(lr, list) and len(lr) == len(self.sched.optimizer.param_groups):
            self.sched._last_lr = [float(x) for x in lr]
