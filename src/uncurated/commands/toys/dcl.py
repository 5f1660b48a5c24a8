"""``uncurated toy dcl``: DCL's estimator concentrates in N negatives and M positives (thesis ch. 3)."""

from __future__ import annotations

import argparse

from ... import toy_defaults
from ..arguments import integer_at_least, positive_float
from ..outputs import add_out_argument, write_toy_outputs

NAME = "dcl"
HELP = "DCL's estimator concentrates: error against N negatives and M positives (thesis ch. 3)"
DESCRIPTION = (
    "The debiased negative term of DCL (thesis Eq. 3.6) estimated from N unlabeled samples and M "
    "positives, against the ideal term E_{p_x^-} e^s it replaces, on a latent-class model of "
    "von Mises-Fisher classes (tau_plus = 1/C) whose ideal term is exact. The error should fall like "
    "N^-1/2 + M^-1/2 (Thm 3.3), while the biased InfoNCE term's stays put. Prints the error grid and "
    "the log-log slopes, and writes dcl_concentration.png and dcl_concentration.json."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--negatives",
        type=integer_at_least(1),
        nargs="+",
        default=list(toy_defaults.DCL_NEGATIVES),
        metavar="N",
        help="numbers of unlabeled samples N, >= 1 (default: %(default)s)",
    )
    parser.add_argument(
        "--positives",
        type=integer_at_least(1),
        nargs="+",
        default=list(toy_defaults.DCL_POSITIVES),
        metavar="M",
        help="numbers of positives M, >= 1 (default: %(default)s)",
    )
    parser.add_argument(
        "--trials",
        type=integer_at_least(1),
        default=toy_defaults.DCL_TRIALS,
        help="anchors averaged per cell, >= 1 (default: %(default)s)",
    )
    parser.add_argument(
        "--classes",
        type=integer_at_least(2),
        default=toy_defaults.DCL_CLASSES,
        help="latent classes C (tau_plus = 1/C), >= 2 (default: %(default)s)",
    )
    parser.add_argument(
        "--kappa",
        type=positive_float,
        default=toy_defaults.DCL_KAPPA,
        help="concentration of each class, > 0 (default: %(default)s)",
    )
    parser.add_argument("--seed", type=integer_at_least(0), default=0, help="seed, >= 0 (default: %(default)s)")
    add_out_argument(parser, "runs/toy-dcl")


def run(args: argparse.Namespace) -> int:
    from ...theory import dcl_concentration

    rows = dcl_concentration.run_dcl_concentration(
        args.negatives, args.positives, args.trials, args.seed, classes=args.classes, kappa=args.kappa
    )
    print(dcl_concentration.format_table(rows))
    settings = {key: getattr(args, key) for key in ("negatives", "positives", "trials", "classes", "kappa", "seed")}
    write_toy_outputs(args.out, "dcl_concentration", rows, settings, dcl_concentration.plot_concentration)
    return 0
