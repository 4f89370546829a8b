"""hdet.attach's arguments (and hdet.OneCycleLR's hdet_* ones): each one
reaches the HELLO hdet reads, or is refused when attach is called, inside or
outside hdet, with an error naming it."""

import os
import sys
import unittest
from unittest import mock

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # test the checkout
import hdet
from hdet import _attach, _loss, _session


def optimizer():
    torch.manual_seed(0)
    p = torch.nn.Parameter(torch.randn(3))
    p.grad = torch.ones(3)
    return torch.optim.AdamW([p], lr=1e-3, weight_decay=0.01)


def make(**kw):
    kw.setdefault("callbacks", {"temperature": lambda v: None})
    opt = optimizer()
    hdet.attach(opt, 100, **kw)
    return opt


def make_onecycle(**kw):
    kw.setdefault("callbacks", {"temperature": lambda v: None})
    opt = optimizer()
    hdet.OneCycleLR(opt, max_lr=0.1, total_steps=100, **kw)
    return opt


class _Hello(Exception):
    pass


def hello_of(build=make, **kw):
    """The HELLO the script would send under hdet at its first optimizer step."""
    def session(optimizer, hello):
        raise _Hello(hello)

    saved = _attach._process
    _attach._process = _attach._Process()
    _attach._process.hooked = True  # no excepthook or atexit from a test
    try:
        with mock.patch.object(_session, "under_hdet", return_value=True), \
                mock.patch.object(_session, "Session", session), mock.patch.object(_loss, "LossRecorder"):
            opt = build(**kw)
            try:
                opt.step()
            except _Hello as e:
                return e.args[0]
    finally:
        _attach._process = saved
    raise AssertionError("no HELLO")


AUTO = {"enabled": True, "form": "offset", "start": 10, "until": 0.5, "guard": 0.01, "bracket": 1, "signal": "train",
        "estimator": "softmax", "clip": 1.5, "sigma": 0.1, "sigma_mode": "relative", "beta": 0,
        "lambda": 1, "commit": "continue"}
EXPLORE = ["lr", {"name": "weight_decay", "base": 0.01, "alpha": 0.5, "spread": "additive", "lower": 0, "upper": 0.1},
           {"name": "temperature", "base": 1.0, "plugin": "my-explorer"}]


class ArgsTest(unittest.TestCase):
    def setUp(self):
        os.environ.pop("HDET_SOCKET", None)

    def check_hello(self, h):
        self.assertEqual(h["hdet_window"], 25)
        self.assertEqual(h["total_steps"], 100)
        self.assertEqual(h["options"], {"alpha": 0.2, "spread": "geometric",
                                        "auto": dict(AUTO, beta=0.0, **{"lambda": 1.0})})
        self.assertEqual(h["explore"], [
            {"name": "lr"},
            {"name": "weight_decay", "base": 0.01, "alpha": 0.5, "spread": "additive", "lower": 0.0, "upper": 0.1},
            {"name": "temperature", "base": 1.0, "plugin": "my-explorer"}])
        self.assertEqual(h["optimizer"], "AdamW")
        self.assertEqual(h["param_groups"], [{"key": "0", "size": 3, "lr": h["param_groups"][0]["lr"],
                                              "weight_decay": 0.01}])
        self.assertIn("temperature", h["hyperparameters"])

    def test_every_argument_reaches_the_hello(self):
        self.check_hello(hello_of(window=25, alpha=0.2, spread="geometric", auto=AUTO, explore=EXPLORE))
        h = hello_of()
        self.assertEqual(h["options"], {}, "nothing set, nothing sent")
        self.assertNotIn("hdet_window", h)
        self.assertEqual(h["explore"], [{"name": "lr"}], "explore's default")
        self.assertFalse(h["probe"])
        self.assertFalse(h["evaluate"])

    def test_onecycle_arguments_reach_the_hello(self):
        self.check_hello(hello_of(make_onecycle, hdet_window=25, hdet_alpha=0.2, hdet_spread="geometric",
                                  hdet_auto=AUTO, explore=EXPLORE))

    def test_dropout_module_is_explored_by_default(self):
        model = torch.nn.Sequential(torch.nn.Linear(2, 2), torch.nn.Dropout(0.1))
        h = hello_of(dropout=model)
        self.assertEqual(h["explore"], [{"name": "lr"}, {"name": "dropout"}])

    def test_refused_arguments_name_themselves(self):
        cases = [
            (TypeError, "window must be an int", dict(window=2.5)),
            (TypeError, "window must be an int", dict(window=True)),
            (ValueError, r"window must be in \[1, total_steps=100\], got 0", dict(window=0)),
            (ValueError, r"window must be in \[1, total_steps=100\], got 101", dict(window=101)),
            (TypeError, "alpha must be a finite number, got '0.2'", dict(alpha="0.2")),
            (TypeError, "alpha must be a finite number, got nan", dict(alpha=float("nan"))),
            (ValueError, "alpha must be >= 0, got -0.1", dict(alpha=-0.1)),
            (ValueError, "spread must be one of multiplicative, additive, geometric, got 'log'", dict(spread="log")),
            (TypeError, "auto must be a dict", dict(auto=False)),
            (ValueError, "auto has the unknown key 'patience'", dict(auto={"patience": 3})),
            (ValueError, r"auto\['decay'\] was removed", dict(auto={"decay": 0.5})),
            (TypeError, r"auto\['until'\] must be a number, got '0.5'", dict(auto={"until": "0.5"})),
            (TypeError, r"auto\['start'\] must be an int, got 1.5", dict(auto={"start": 1.5})),
            (TypeError, r"auto\['enabled'\] must be a bool, got 1", dict(auto={"enabled": 1})),
            (ValueError, r"auto\['commit'\] must be one of restart, continue, got 'later'",
             dict(auto={"commit": "later"})),
            (ValueError, "auto sets the lr explorer's auto block, but explore has no \"lr\"",
             dict(auto={"until": 0.5}, explore=["weight_decay"])),
            (TypeError, "explore must be a list", dict(explore="lr")),
            (ValueError, "cannot explore 'dropout'", dict(explore=["dropout"])),
            (ValueError, "cannot explore 'lr/0'", dict(explore=["lr/0"])),  # one group: no per-group names
            (ValueError, "cannot explore 'beta2'", dict(explore=["beta2"])),
            (ValueError, "cannot explore None", dict(explore=[{"alpha": 0.1}])),
            (ValueError, "explore names 'lr' twice", dict(explore=["lr", {"name": "lr"}])),
            (ValueError, r"explore\[1\] \('weight_decay'\) has the unknown key 'scale'",
             dict(explore=["lr", {"name": "weight_decay", "scale": "log"}])),
            (ValueError, r"explore\[0\] \('lr'\)\['base'\]: a learning rate's base is the script's own rate",
             dict(explore=[{"name": "lr", "base": 0.1}])),
            (TypeError, r"explore\[0\] \('lr'\)\['upper'\] must be a finite number, got '1'",
             dict(explore=[{"name": "lr", "upper": "1"}])),
            (ValueError, r"explore\[0\] \('weight_decay'\)\['alpha'\] must be >= 0",
             dict(explore=[{"name": "weight_decay", "alpha": -1}])),
            (ValueError, r"explore\[0\] \('weight_decay'\)\['spread'\] must be one of",
             dict(explore=[{"name": "weight_decay", "spread": "linear"}])),
            (TypeError, r"explore\[0\] \('temperature'\)\['plugin'\] must be an explorer binary name",
             dict(explore=[{"name": "temperature", "plugin": 3}])),
            (TypeError, "evaluate is not callable", dict(evaluate=3)),
            (TypeError, "probe is not callable", dict(probe="fn")),
            (TypeError, "callback for 'scale' is not callable", dict(callbacks={"scale": 1.0})),
            (ValueError, "callback 'lr' would replace the optimizer's hyperparameter", dict(callbacks={"lr": print})),
            (ValueError, "has no dropout layer", dict(dropout=torch.nn.Linear(2, 2))),
        ]
        for kind, message, kw in cases:
            with self.subTest(kw=kw):
                with self.assertRaisesRegex(kind, message):
                    make(**kw)

    def test_refused_onecycle_arguments(self):
        # hdet.OneCycleLR passes its hdet_* arguments to attach; the message
        # names attach's argument (window, alpha, ...), with or without the
        # hdet_ prefix.
        cases = [
            (TypeError, "(hdet_)?window must be an int", dict(hdet_window=2.5)),
            (ValueError, r"(hdet_)?alpha must be >= 0, got -0.1", dict(hdet_alpha=-0.1)),
            (ValueError, "(hdet_)?spread must be one of", dict(hdet_spread="log")),
            (ValueError, "(hdet_)?auto has the unknown key 'patience'", dict(hdet_auto={"patience": 3})),
            (ValueError, "cannot explore 'dropout'", dict(explore=["dropout"])),
            (ValueError, "verbose=True is not supported", dict(verbose=True)),
            (TypeError, "the epoch argument", None),
        ]
        for kind, message, kw in cases:
            with self.subTest(kw=kw):
                with self.assertRaisesRegex(kind, message):
                    if kw is None:
                        s = hdet.OneCycleLR(optimizer(), max_lr=0.1, total_steps=10)
                        s.step(epoch=1)
                    else:
                        make_onecycle(**kw)

    def test_unknown_keyword_is_a_type_error(self):
        with self.assertRaises(TypeError):
            make(hdet_window=10)  # attach's is window
        with self.assertRaises(TypeError):
            make_onecycle(hdet_gamma=1)


if __name__ == "__main__":
    unittest.main()
