"""Checks of hdet.attach's arguments (and hdet.OneCycleLR's hdet_* ones),
inside or outside hdet: every argument either reaches hdet or is refused
here, never silently dropped. hdet checks them again
(internal/bridge/settings.go) and its explorers check the ranges when they
start."""

import math
import numbers

SPREADS = ("multiplicative", "additive", "geometric")

# hdet_auto's keys: the built-in lr explorer's "auto" block (builtin.AutoSpec in hparam/builtin),
# each with its JSON type or allowed values.
_NUMBER, _INT, _BOOL = "a number", "an int", "a bool"
AUTO_KEYS = {
    "enabled": _BOOL, "form": ("offset", "paper"), "start": _INT, "until": _NUMBER, "guard": _NUMBER, "bracket": _NUMBER,
    "signal": ("probe", "train"), "estimator": ("quadratic", "softmax"), "clip": _NUMBER, "sigma": _NUMBER,
    "sigma_mode": ("absolute", "relative"), "beta": _NUMBER, "lambda": _NUMBER, "commit": ("restart", "continue"),
}

# What an explore dict may give besides "name".
EXPLORE_KEYS = ("plugin", "alpha", "spread", "base", "lower", "upper")


def _is_number(v):
    return isinstance(v, numbers.Real) and not isinstance(v, bool) and math.isfinite(v)


def number(arg, v):
    """v as a float, or a TypeError naming arg."""
    if not _is_number(v):
        raise TypeError("hdet: %s must be a finite number, got %r" % (arg, v))
    return float(v)


def _is_int(v):
    return isinstance(v, numbers.Integral) and not isinstance(v, bool)


def total_steps(v):
    """total_steps as an int, or an error naming what is allowed."""
    if not _is_int(v):
        raise TypeError("hdet: total_steps must be a positive int (the optimizer steps the script takes), got %r"
                        % (v,))
    if v < 1:
        raise ValueError("hdet: total_steps must be a positive int, got %d" % v)
    return int(v)


def window(v, total, arg="window"):
    if v is None:
        return None
    if not _is_int(v):
        raise TypeError("hdet: %s must be an int (steps per window), got %r" % (arg, v))
    if not 1 <= v <= total:
        raise ValueError("hdet: %s must be in [1, total_steps=%d], got %d" % (arg, total, v))
    return int(v)


def alpha(arg, v):
    if v is None:
        return None
    if number(arg, v) < 0:
        raise ValueError("hdet: %s must be >= 0, got %r" % (arg, v))
    return float(v)


def spread(arg, v):
    if v is None:
        return None
    if not isinstance(v, str) or v not in SPREADS:
        raise ValueError("hdet: %s must be one of %s, got %r" % (arg, ", ".join(SPREADS), v))
    return v


def auto(v, arg="auto"):
    if v is None:
        return None
    if not isinstance(v, dict):
        raise TypeError("hdet: %s must be a dict of the lr explorer's auto settings (%s), got %r"
                        % (arg, ", ".join(AUTO_KEYS), v))
    out = {}
    for k, x in v.items():
        if k == "decay":
            raise ValueError("hdet: %s['decay'] was removed: the script's own schedule "
                             "replaced it; delete the key" % arg)
        want = AUTO_KEYS.get(k)
        if want is None:
            raise ValueError("hdet: %s has the unknown key %r; allowed: %s" % (arg, k, ", ".join(AUTO_KEYS)))
        out[k] = _auto_value(arg, k, x, want)
    return out


def _auto_value(arg, k, x, want):
    ok = {_NUMBER: _is_number(x), _BOOL: isinstance(x, bool), _INT: _is_int(x)}.get(want)
    if ok is None:  # one of the listed strings
        if isinstance(x, str) and x in want:
            return x
        raise ValueError("hdet: %s[%r] must be one of %s, got %r" % (arg, k, ", ".join(want), x))
    if not ok:
        raise TypeError("hdet: %s[%r] must be %s, got %r" % (arg, k, want, x))
    return float(x) if want == _NUMBER else int(x) if want == _INT else x


def explore(entries, names, has_auto):
    """The explore list as the dicts the HELLO carries, checked."""
    if isinstance(entries, (str, dict)) or not isinstance(entries, (list, tuple)):
        raise TypeError("hdet: explore must be a list of names or dicts, got %r" % (entries,))
    out = [_explore_entry(i, e, names) for i, e in enumerate(entries)]
    chosen = [e["name"] for e in out]
    for n in chosen:
        if chosen.count(n) > 1:
            raise ValueError("hdet: explore names %r twice" % n)
    if "lr" in chosen and any(n.startswith("lr/") for n in chosen):
        raise ValueError("hdet: explore has both \"lr\" (every group's rate) and a group's \"lr/KEY\"; "
                         "choose one multiplier for all groups or one per group")
    if has_auto and "lr" not in chosen:
        raise ValueError("hdet: auto sets the lr explorer's auto block, but explore has no \"lr\"")
    return out


def _explore_entry(i, e, names):
    e = {k: v for k, v in e.items() if v is not None or k == "name"} if isinstance(e, dict) else {"name": e}
    name = e.get("name")
    if not isinstance(name, str) or name not in names:
        raise ValueError("hdet: cannot explore %r; this optimizer and these callbacks offer %s" % (name, sorted(names)))
    arg = "explore[%d] (%r)" % (i, name)
    for k in e:
        if k != "name" and k not in EXPLORE_KEYS:
            raise ValueError("hdet: %s has the unknown key %r; allowed: name, %s" % (arg, k, ", ".join(EXPLORE_KEYS)))
    if "plugin" in e and (not isinstance(e["plugin"], str) or not e["plugin"]):
        raise TypeError("hdet: %s['plugin'] must be an explorer binary name, got %r" % (arg, e["plugin"]))
    if "base" in e and (name == "lr" or name.startswith("lr/")):
        raise ValueError("hdet: %s['base']: a learning rate's base is the script's own rate (hdet explores a "
                         "multiplier of it); remove base" % arg)
    for k in ("base", "lower", "upper"):
        if k in e:
            e[k] = number("%s[%r]" % (arg, k), e[k])
    if "alpha" in e:
        e["alpha"] = alpha("%s['alpha']" % arg, e["alpha"])
    if "spread" in e:
        e["spread"] = spread("%s['spread']" % arg, e["spread"])
    return e
