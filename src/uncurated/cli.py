"""The ``uncurated`` command: list the objectives, or compare them on Fashion-MNIST.

Run ``uncurated --help`` for the subcommands and ``uncurated COMMAND --help``
for the options of each.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from pathlib import Path

from . import __version__, objectives
from .data import DEFAULT_ROOT, load_fashion_mnist
from .demo import format_parameters, objective_table, print_objective_table


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    Usage errors and a missing dataset exit with status 2 through ``SystemExit``.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.run(args)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``uncurated`` and its subcommands; each subcommand sets ``run``."""
    parser = argparse.ArgumentParser(
        prog="uncurated",
        description="Contrastive representation learning from uncurated data.",
        epilog="Run `uncurated COMMAND --help` for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(title="commands", dest="command", required=True)

    listing = commands.add_parser(
        "objectives",
        help="list every objective with its summary and parameters",
        description="List every contrastive objective: its name, summary and parameters with their defaults.",
    )
    listing.set_defaults(run=_run_objectives)

    demo = commands.add_parser(
        "demo",
        help="evaluate every objective on a Fashion-MNIST test batch",
        description=(
            "Evaluate every objective, under both pairings, on two augmented views of a Fashion-MNIST "
            "test batch embedded by a fixed random projection. Nothing is trained: the table shows "
            "each objective's scale and gradient size on the same batch, not quality."
        ),
    )
    demo.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_ROOT,
        metavar="DIR",
        help="folder with the Fashion-MNIST IDX files (default: %(default)s, "
        "installed by `sudo apt-get install dataset-fashion-mnist`)",
    )
    demo.add_argument(
        "--batch-size", type=_integer_at_least(2), default=256, help="images in the batch, >= 2 (default: %(default)s)"
    )
    demo.add_argument(
        "--dim", type=_integer_at_least(1), default=128, help="embedding dimension, >= 1 (default: %(default)s)"
    )
    demo.add_argument(
        "--seed", type=int, default=0, help="seed of the projection and augmentations (default: %(default)s)"
    )
    demo.set_defaults(run=_run_demo, parser=demo)
    return parser


def _run_objectives(args: argparse.Namespace) -> int:
    for spec in objectives.available():
        print(f"{spec.name}: {spec.summary}")
        print(f"    {format_parameters(spec.defaults)}")
    return 0


def _run_demo(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    try:
        images, _ = load_fashion_mnist(args.data_dir, split="test")
    except (FileNotFoundError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    if args.batch_size > len(images):
        parser.error(f"argument --batch-size: the test split has {len(images)} images, got {args.batch_size}")
    rows = objective_table(images, batch_size=args.batch_size, dim=args.dim, seed=args.seed)
    print_objective_table(rows, batch_size=args.batch_size, dim=args.dim, seed=args.seed)
    return 0


def _integer_at_least(low: int):
    """An argparse ``type`` accepting integers >= ``low``."""

    def parse(text: str) -> int:
        try:
            value = int(text)
        except ValueError:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {text!r}") from None
        if value < low:
            raise argparse.ArgumentTypeError(f"must be an integer >= {low}, got {value}")
        return value

    return parse
