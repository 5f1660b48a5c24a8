"""``uncurated demo``: every objective, under both pairings, on one Fashion-MNIST test batch, untrained."""

from __future__ import annotations

import argparse
from pathlib import Path

from .arguments import Number, add_numbers, usage_errors

NAME = "demo"
HELP = "evaluate every objective on a Fashion-MNIST test batch"
DESCRIPTION = (
    "Evaluate every objective, under both pairings, on two augmented views of a Fashion-MNIST "
    "test batch embedded by a fixed random projection. Nothing is trained: the table shows "
    "each objective's scale and gradient size on the same batch, not quality."
)


OPTIONS = (
    Number("--batch-size", "images in the batch", 256, low=2),
    Number("--dim", "embedding dimension", 128, low=1),
    Number("--seed", "seed of the projection and augmentations", 0, low=0),
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="folder with the Fashion-MNIST IDX files (default: Debian's, /usr/share/datasets/fashion-mnist, "
        "installed by `sudo apt-get install dataset-fashion-mnist`)",
    )
    add_numbers(parser, OPTIONS)


def run(args: argparse.Namespace) -> int:
    from ..data import DEFAULT_ROOT, load_fashion_mnist
    from ..demo import objective_table, print_objective_table

    parser: argparse.ArgumentParser = args.parser
    with usage_errors(parser):
        images, _ = load_fashion_mnist(args.data_dir or DEFAULT_ROOT, split="test")
    if args.batch_size > len(images):
        parser.error(f"argument --batch-size: the test split has {len(images)} images, got {args.batch_size}")
    rows = objective_table(images, batch_size=args.batch_size, dim=args.dim, seed=args.seed)
    print_objective_table(rows, batch_size=args.batch_size, dim=args.dim, seed=args.seed)
    return 0
