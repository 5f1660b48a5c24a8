"""The theory toys added after NUCLR's and WPSE's: ``uncurated toy dcl`` and ``uncurated toy clip-margin``."""

from __future__ import annotations

import argparse
import json
from dataclasses import asdict
from pathlib import Path

from ..theory import dcl_concentration
from .arguments import integer_at_least, positive_float


def add_dcl_toy(toys: argparse._SubParsersAction) -> None:
    dcl = toys.add_parser(
        "dcl",
        help="DCL's estimator concentrates: error against N negatives and M positives (thesis ch. 3)",
        description=(
            "The debiased negative term of DCL (thesis Eq. 3.6) estimated from N unlabeled samples and M "
            "positives, against the ideal term E_{p_x^-} e^s it replaces, on a latent-class model of "
            "von Mises-Fisher classes (tau_plus = 1/C) whose ideal term is exact. The error should fall like "
            "N^-1/2 + M^-1/2 (Thm 3.3), while the biased InfoNCE term's stays put. Prints the error grid and "
            "the log-log slopes, and writes dcl_concentration.png and dcl_concentration.json."
        ),
    )
    dcl.add_argument(
        "--negatives", type=integer_at_least(1), nargs="+", default=list(dcl_concentration.DEFAULT_NEGATIVES),
        metavar="N", help="numbers of unlabeled samples N, >= 1 (default: %(default)s)",
    )
    dcl.add_argument(
        "--positives", type=integer_at_least(1), nargs="+", default=list(dcl_concentration.DEFAULT_POSITIVES),
        metavar="M", help="numbers of positives M, >= 1 (default: %(default)s)",
    )
    dcl.add_argument(
        "--trials", type=integer_at_least(1), default=dcl_concentration.DEFAULT_TRIALS,
        help="anchors averaged per cell, >= 1 (default: %(default)s)",
    )
    dcl.add_argument(
        "--classes", type=integer_at_least(2), default=dcl_concentration.DEFAULT_CLASSES,
        help="latent classes C (tau_plus = 1/C), >= 2 (default: %(default)s)",
    )
    dcl.add_argument(
        "--kappa", type=positive_float, default=dcl_concentration.DEFAULT_KAPPA,
        help="concentration of each class, > 0 (default: %(default)s)",
    )
    dcl.add_argument("--seed", type=integer_at_least(0), default=0, help="seed, >= 0 (default: %(default)s)")
    dcl.add_argument(
        "--out", type=Path, default=Path("runs/toy-dcl"), metavar="DIR",
        help="folder for the PNG and JSON, created if missing (default: %(default)s)",
    )
    dcl.set_defaults(run=_run_dcl_toy)


def _run_dcl_toy(args: argparse.Namespace) -> int:
    rows = dcl_concentration.run_dcl_concentration(
        args.negatives, args.positives, args.trials, args.seed, classes=args.classes, kappa=args.kappa
    )
    print(dcl_concentration.format_table(rows))
    args.out.mkdir(parents=True, exist_ok=True)
    figure = dcl_concentration.plot_concentration(rows, args.out / "dcl_concentration.png")
    figures = args.out / "dcl_concentration.json"
    settings = {key: getattr(args, key) for key in ("negatives", "positives", "trials", "classes", "kappa", "seed")}
    figures.write_text(json.dumps({**settings, "rows": [asdict(row) for row in rows]}, indent=2) + "\n")
    print(f"\nwrote {figure} and {figures}")
    return 0
