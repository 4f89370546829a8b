"""hdet.OneCycleLR's hdet arguments: each one reaches the HELLO hdet reads,
or is refused at construction with an error naming it."""

import os
import sys
import unittest
from unittest import mock

import torch

sys.path.insert(0, os.path.join(os.path.dirname(os.path.abspath(__file__)), ".."))  # test the checkout
import hdet  # noqa: E402
from hdet import _loss, _session  # noqa: E402


def make(**kw):
    torch.manual_seed(0)
    opt = torch.optim.AdamW([torch.nn.Parameter(torch.randn(3))], lr=1e-3, weight_decay=0.01)
    kw.setdefault("callbacks", {"temperature": lambda v: None})
    return hdet.OneCycleLR(opt, max_lr=0.1, total_steps=100, **kw)


class _Hello(Exception):
    pass


def hello_of(**kw):
    """The HELLO the scheduler would send under hdet."""
    def session(optimizer, hello, total):
        raise _Hello(hello)

    with mock.patch.object(_session, "under_hdet", return_value=True), \
            mock.patch.object(_session, "Session", session), mock.patch.object(_loss, "install"):
        try:
            make(**kw)
        except _Hello as e:
            return e.args[0]
    raise AssertionError("no HELLO")


class ArgsTest(unittest.TestCase):
    def setUp(self):
        os.environ.pop("HDET_SOCKET", None)

    def test_every_argument_reaches_the_hello(self):
        auto = {"enabled": True, "form": "offset", "start": 10, "until": 0.5, "guard": 0.01, "signal": "train",
                "estimator": "softmax", "clip": 1.5, "sigma": 0.1, "sigma_mode": "relative", "beta": 0,
                "lambda": 1, "commit": "continue"}
        h = hello_of(hdet_window=25, hdet_alpha=0.2, hdet_spread="geometric", hdet_auto=auto,
                     explore=["lr", {"name": "weight_decay", "base": 0.01, "alpha": 0.5, "spread": "additive",
                                     "lower": 0, "upper": 0.1},
                              {"name": "temperature", "plugin": "my-explorer"}])
        self.assertEqual(h["hdet_window"], 25)
        self.assertEqual(h["options"], {"alpha": 0.2, "spread": "geometric",
                                        "auto": dict(auto, beta=0.0, **{"lambda": 1.0})})
        self.assertEqual(h["explore"], [
            {"name": "lr"},
            {"name": "weight_decay", "base": 0.01, "alpha": 0.5, "spread": "additive", "lower": 0.0, "upper": 0.1},
            {"name": "temperature", "plugin": "my-explorer"}])
        self.assertEqual(hello_of()["options"], {}, "nothing set, nothing sent")
        self.assertNotIn("hdet_window", hello_of())

    def test_refused_arguments_name_themselves(self):
        cases = [
            (TypeError, "hdet_window must be an int", dict(hdet_window=2.5)),
            (TypeError, "hdet_window must be an int", dict(hdet_window=True)),
            (ValueError, r"hdet_window must be in \[1, total_steps=100\], got 0", dict(hdet_window=0)),
            (ValueError, r"hdet_window must be in \[1, total_steps=100\], got 101", dict(hdet_window=101)),
            (TypeError, "hdet_alpha must be a finite number, got '0.2'", dict(hdet_alpha="0.2")),
            (TypeError, "hdet_alpha must be a finite number, got nan", dict(hdet_alpha=float("nan"))),
            (ValueError, "hdet_alpha must be >= 0, got -0.1", dict(hdet_alpha=-0.1)),
            (ValueError, "hdet_spread must be one of multiplicative, additive, geometric, got 'log'",
             dict(hdet_spread="log")),
            (TypeError, "hdet_auto must be a dict", dict(hdet_auto=False)),
            (ValueError, "hdet_auto has the unknown key 'patience'", dict(hdet_auto={"patience": 3})),
            (ValueError, r"hdet_auto\['decay'\] was removed", dict(hdet_auto={"decay": 0.5})),
            (TypeError, r"hdet_auto\['until'\] must be a number, got '0.5'", dict(hdet_auto={"until": "0.5"})),
            (TypeError, r"hdet_auto\['start'\] must be an int, got 1.5", dict(hdet_auto={"start": 1.5})),
            (TypeError, r"hdet_auto\['enabled'\] must be a bool, got 1", dict(hdet_auto={"enabled": 1})),
            (ValueError, r"hdet_auto\['commit'\] must be one of restart, continue, got 'later'",
             dict(hdet_auto={"commit": "later"})),
            (ValueError, "hdet_auto sets the lr explorer's auto block, but explore has no \"lr\"",
             dict(hdet_auto={"until": 0.5}, explore=["weight_decay"])),
            (TypeError, "explore must be a list", dict(explore="lr")),
            (ValueError, "cannot explore 'dropout'", dict(explore=["dropout"])),
            (ValueError, "explore names 'lr' twice", dict(explore=["lr", {"name": "lr"}])),
            (ValueError, r"explore\[1\] \('weight_decay'\) has the unknown key 'scale'",
             dict(explore=["lr", {"name": "weight_decay", "scale": "log"}])),
            (ValueError, r"explore\[0\] \('lr'\)\['base'\]: lr's base is the OneCycleLR schedule",
             dict(explore=[{"name": "lr", "base": 0.1}])),
            (TypeError, r"explore\[0\] \('lr'\)\['upper'\] must be a finite number, got '1'",
             dict(explore=[{"name": "lr", "upper": "1"}])),
            (ValueError, r"explore\[0\] \('weight_decay'\)\['alpha'\] must be >= 0",
             dict(explore=[{"name": "weight_decay", "alpha": -1}])),
            (ValueError, r"explore\[0\] \('weight_decay'\)\['spread'\] must be one of",
             dict(explore=[{"name": "weight_decay", "spread": "linear"}])),
            (TypeError, r"explore\[0\] \('temperature'\)\['plugin'\] must be an explorer binary name",
             dict(explore=[{"name": "temperature", "plugin": 3}])),
        ]
        for kind, message, kw in cases:
            with self.subTest(kw=kw):
                with self.assertRaisesRegex(kind, message):
                    make(**kw)

    def test_unknown_keyword_is_torchs_type_error(self):
        with self.assertRaises(TypeError):
            make(hdet_gamma=1)


if __name__ == "__main__":
    unittest.main()
