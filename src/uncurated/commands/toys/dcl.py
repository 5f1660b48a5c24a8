"""``uncurated toy dcl``: DCL's estimator concentrates in N negatives and M positives (thesis ch. 3)."""

from __future__ import annotations

import argparse

from ... import toy_defaults
from ..arguments import Number
from ..outputs import write_toy_outputs

NAME = "dcl"
HELP = "DCL's estimator concentrates: error against N negatives and M positives (Chuang 2023, ch. 3)"
DESCRIPTION = (
    "The debiased negative term of DCL (thesis Eq. 3.6) estimated from N unlabeled samples and M "
    "positives, against the ideal term E_{p_x^-} e^s it replaces, on a latent-class model of "
    "von Mises-Fisher classes (tau_plus = 1/C) whose ideal term is exact. The error should fall like "
    "N^-1/2 + M^-1/2 (Thm 3.3), while the biased InfoNCE term's stays put. Prints the error grid and "
    "the log-log slopes, and writes dcl_concentration.png and dcl_concentration.json."
)


OPTIONS = (
    Number("--negatives", "numbers of unlabeled samples N", toy_defaults.DCL_NEGATIVES, low=1, many=True, metavar="N"),
    Number("--positives", "numbers of positives M", toy_defaults.DCL_POSITIVES, low=1, many=True, metavar="M"),
    Number("--trials", "anchors averaged per cell", toy_defaults.DCL_TRIALS, low=1),
    Number("--classes", "latent classes C (tau_plus = 1/C)", toy_defaults.DCL_CLASSES, low=2),
    Number("--kappa", "concentration of each class", toy_defaults.DCL_KAPPA),
    Number("--seed", "seed", 0, low=0),
)


def run(args: argparse.Namespace) -> int:
    from ...theory import dcl_concentration

    rows = dcl_concentration.run_dcl_concentration(
        args.negatives, args.positives, args.trials, args.seed, classes=args.classes, kappa=args.kappa
    )
    print(dcl_concentration.format_table(rows))
    settings = {key: getattr(args, key) for key in ("negatives", "positives", "trials", "classes", "kappa", "seed")}
    write_toy_outputs(args.out, "dcl_concentration", rows, settings, dcl_concentration.plot_concentration)
    return 0
