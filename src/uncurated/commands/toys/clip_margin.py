"""``uncurated toy clip-margin``: Chen et al. 2024's case study of the margin CLIP learns, against the temperature."""

from __future__ import annotations

import argparse

from ... import toy_defaults
from ..arguments import Number, check_distinct
from ..outputs import write_toy_outputs

NAME = "clip-margin"
HELP = "Chen et al. 2024's case study: the square loss fails zero-shot, CLIP's margin grows with the temperature"
DESCRIPTION = (
    "The synthetic data model of Chen et al. 2024 (Def. 5.3, Cor. 5.7): images and texts share a class "
    "feature with margin gamma, texts carry a class-independent nuisance. Linear encoders trained with "
    "the square loss (solved exactly), CLIP (SGD from W = 0) and CLIP with the positive-pair regularizer "
    "(lambda = --lam; the toy needs more than the paper's 0.1) at each temperature, next to the oracle "
    "W*. Prints zero-shot error, mean margin, the LSE margin bound and alpha_hat/alpha, and writes "
    "clip_margin.png and clip_margin.json."
)


OPTIONS = (
    Number("--temperatures", "CLIP temperatures", toy_defaults.CLIP_MARGIN_TEMPERATURES, many=True, metavar="TAU"),
    Number("--lam", "weight of the positive-pair regularizer", toy_defaults.CLIP_MARGIN_LAM),
    Number("--steps", "SGD steps per fit", toy_defaults.CLIP_MARGIN_STEPS, low=1),
    Number("--seeds", "distinct seeds of the data and the fits", (0,), low=0, many=True, metavar="SEED"),
)


def run(args: argparse.Namespace) -> int:
    from ...theory import clip_margin_toy

    check_distinct(args.parser, "--seeds", args.seeds)
    rows = clip_margin_toy.run_clip_margin_toy(
        args.seeds, temperatures=args.temperatures, lam=args.lam, steps=args.steps
    )
    print(clip_margin_toy.format_table(rows))
    settings = {key: getattr(args, key) for key in ("temperatures", "lam", "steps", "seeds")}
    write_toy_outputs(args.out, "clip_margin", rows, settings, clip_margin_toy.plot_margins)
    return 0
