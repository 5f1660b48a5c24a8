"""``uncurated bound``: Nozawa & Sato 2021's bounds on the supervised loss, from a run or a saved feature file."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .arguments import Number, add_numbers, add_source_arguments, usage_errors

DEFAULT_NEGATIVES = (4, 16, 64, 256)

NAME = "bound"
HELP = "Nozawa & Sato 2021's coupon-collector bounds (Eq. 8 and 10) on a trained encoder, against K"
DESCRIPTION = (
    "Measure the lower bounds of Nozawa & Sato (2021) on the contrastive loss, and the upper bounds\n"
    "they give on the mean classifier's supervised loss, for several numbers of negatives K.\n"
    "Class means come from augmented training images; the test split is shuffled each epoch and\n"
    "cut into groups of K + 1 (each member an anchor against the others). The CURL bound (Eq. 8)\n"
    "explodes with K; the proposed one (Eq. 10) should not.\n\n"
    "  uncurated bound runs/fashion-mnist-dcl-seed0\n"
    "  uncurated bound runs/my-run --negatives 4 16 --save-features feats.pt\n"
    "  uncurated bound feats.pt                     # measure saved features again"
)
EPILOG = "Writes bound.json and bound.png into --out (default: SOURCE's folder, bound/ inside a run)."
FORMATTER = argparse.RawDescriptionHelpFormatter


OPTIONS = (
    Number("--negatives", "numbers of negatives", DEFAULT_NEGATIVES, low=1, many=True, metavar="K"),
    Number("--augmentations", "augmentations embedded per image", 10, low=2, metavar="A", default_note=", the paper's"),
    Number("--train-samples", "training images for the class means", 5000, low=1, metavar="N"),
    Number("--epochs", "reshuffles of the test split", 10, low=1, default_note=", the paper's"),
    Number(
        "--temperature",
        "temperature t of the logits",
        None,
        default_note="the run's objective's, learned or set",
    ),
    Number("--seed", "seed", 0, low=0),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_source_arguments(parser, "a feature file (.pt)")
    add_numbers(parser, OPTIONS)
    parser.add_argument("--save-features", type=Path, default=None, metavar="FILE", help="also save the features")


def run(args: argparse.Namespace) -> int:
    # The library is imported when the command runs, so that --help starts at once.
    from ..theory.bound_report import format_bound_table, load_features, measure_bounds, plot_bounds, save_features
    from ..train.bound_features import features_from_run

    with usage_errors(args.parser):
        if args.source.is_file():
            features = load_features(args.source)
            if args.temperature is not None:
                features.temperature = args.temperature
            out = args.out or args.source.parent
        else:
            features = features_from_run(
                args.source,
                train_samples=args.train_samples,
                augmentations=args.augmentations,
                seed=args.seed,
                temperature=args.temperature,
            )
            out = args.out or args.source / "bound"
        report = measure_bounds(features, args.negatives, epochs=args.epochs, seed=args.seed)
    if args.save_features:
        save_features(features, args.save_features)
    print(
        f"Nozawa & Sato 2021 bounds (t = {features.temperature:g}, {len(features.test_labels)} test samples, "
        f"{features.test_views.shape[1]} augmentations each, {args.epochs} epochs); terms include their coefficients"
    )
    print(format_bound_table(report))
    out.mkdir(parents=True, exist_ok=True)
    figures = out / "bound.json"
    figures.write_text(json.dumps({"temperature": features.temperature, **report.as_dict()}, indent=2) + "\n")
    plot_bounds(report, out / "bound.png")
    print(f"wrote {figures} and {out / 'bound.png'}")
    return 0
