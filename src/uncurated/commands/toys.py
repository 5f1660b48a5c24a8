"""The theory toys added after NUCLR's and WPSE's: ``uncurated toy dcl`` and ``uncurated toy clip-margin``."""

from __future__ import annotations

import argparse
from pathlib import Path

from ..theory import clip_margin_toy, dcl_concentration
from .arguments import integer_at_least, positive_float
from .outputs import write_toy_outputs


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
    settings = {key: getattr(args, key) for key in ("negatives", "positives", "trials", "classes", "kappa", "seed")}
    write_toy_outputs(args.out, "dcl_concentration", rows, settings, dcl_concentration.plot_concentration)
    return 0


def add_clip_margin_toy(toys: argparse._SubParsersAction) -> None:
    margin = toys.add_parser(
        "clip-margin",
        help="seed 003's case study: the square loss fails zero-shot, CLIP's margin grows with the temperature",
        description=(
            "The synthetic data model of seed 003 (Def. 5.3, Cor. 5.7): images and texts share a class "
            "feature with margin gamma, texts carry a class-independent nuisance. Linear encoders trained with "
            "the square loss (solved exactly), CLIP (SGD from W = 0) and CLIP with the positive-pair regularizer "
            "(lambda = --lam; the toy needs more than the paper's 0.1) at each temperature, next to the oracle "
            "W*. Prints zero-shot error, mean margin, the LSE margin bound and alpha_hat/alpha, and writes "
            "clip_margin.png and clip_margin.json."
        ),
    )
    margin.add_argument(
        "--temperatures", type=positive_float, nargs="+", default=list(clip_margin_toy.DEFAULT_TEMPERATURES),
        metavar="TAU", help="CLIP temperatures, > 0 (default: %(default)s)",
    )
    margin.add_argument(
        "--lam", type=positive_float, default=clip_margin_toy.DEFAULT_LAM,
        help="weight of the positive-pair regularizer, > 0 (default: %(default)s)",
    )
    margin.add_argument(
        "--steps", type=integer_at_least(1), default=clip_margin_toy.DEFAULT_STEPS,
        help="SGD steps per fit, >= 1 (default: %(default)s)",
    )
    margin.add_argument(
        "--seeds", type=integer_at_least(0), nargs="+", default=[0], metavar="SEED",
        help="distinct seeds of the data and the fits, >= 0 (default: 0)",
    )
    margin.add_argument(
        "--out", type=Path, default=Path("runs/toy-clip-margin"), metavar="DIR",
        help="folder for the PNG and JSON, created if missing (default: %(default)s)",
    )
    margin.set_defaults(run=_run_clip_margin_toy, parser=margin)


def _run_clip_margin_toy(args: argparse.Namespace) -> int:
    if len(set(args.seeds)) != len(args.seeds):
        args.parser.error(f"argument --seeds: must be distinct, got {' '.join(map(str, args.seeds))}")
    rows = clip_margin_toy.run_clip_margin_toy(
        args.seeds, temperatures=args.temperatures, lam=args.lam, steps=args.steps
    )
    print(clip_margin_toy.format_table(rows))
    settings = {key: getattr(args, key) for key in ("temperatures", "lam", "steps", "seeds")}
    write_toy_outputs(args.out, "clip_margin", rows, settings, clip_margin_toy.plot_margins)
    return 0
