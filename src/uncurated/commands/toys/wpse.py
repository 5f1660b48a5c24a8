"""``uncurated toy wpse``: how near CLIP and weighted point sets get to PMI on a discrete joint (Uesaka et al. 2025)."""

from __future__ import annotations

import argparse
import sys
import time

from ... import toy_defaults
from ..arguments import Number, check_distinct
from ..outputs import write_toy_outputs

NAME = "wpse"
HELP = "WPSE's toy: how close CLIP and weighted point sets get to PMI on a discrete joint"
DESCRIPTION = (
    "A synthetic experiment for WPSE (Uesaka et al. 2025; the protocol is this package's). X and Y have N items "
    "each and a "
    "random joint P = softmax(1.5 randn(N^2)) with a full-rank PMI table. Lookup-table encoders are "
    "trained with Adam on the exact population loss L of Eq. 2: CLIP (one unit vector per item), WPSE "
    "with M = 1, 4 and 8 points (Eq. 6, kernel 0.5 u.v + 0.5 Gaussian(0.5)) and linear-only WPSE with "
    "M = 8. Prints the gap L + I(X;Y) >= 0 (0 iff the similarity is PMI + const, Prop. 4.1) per model "
    "and seed, and writes wpse_toy.png and wpse_toy.json."
)


OPTIONS = (
    Number(
        "--seeds",
        "seeds of the joint and the initializations",
        toy_defaults.WPSE_SEEDS,
        low=0,
        many=True,
        metavar="SEED",
    ),
    Number("--steps", "Adam steps per fit", toy_defaults.WPSE_STEPS, low=1),
    Number("--items", "items of X and of Y", toy_defaults.WPSE_ITEMS, low=2, metavar="N"),
    Number("--dim", "dimension d of CLIP's vectors and of WPSE's points", toy_defaults.WPSE_DIM, low=1, metavar="D"),
)


def run(args: argparse.Namespace) -> int:
    from ...theory import wpse_toy

    check_distinct(args.parser, "--seeds", args.seeds)
    start = time.perf_counter()

    def report(row: wpse_toy.WPSEToyRow) -> None:
        elapsed = time.perf_counter() - start
        print(
            f"toy wpse: {row.label}, seed {row.seed} done, gap {row.gap:.4g} ({elapsed:.1f} s elapsed)",
            file=sys.stderr,
        )

    rows = wpse_toy.run_wpse_toy(args.seeds, items=args.items, dim=args.dim, steps=args.steps, progress=report)
    information = {row.seed: row.mutual_information for row in rows}
    print(
        f"WPSE toy (Uesaka et al. 2025): N = {args.items} items per side, "
        f"P = softmax({wpse_toy.JOINT_SCALE:g} randn(N^2)),\n"
        f"lookup-table encoders with points in R^{args.dim}, {args.steps} Adam steps (lr {wpse_toy.LEARNING_RATE:g}) "
        "on the exact loss L of Eq. 2.\n"
        "Each cell is the gap L + I(X;Y) >= 0, 0 iff G = PMI + const (Prop. 4.1); rank G is the largest\n"
        "numerical rank of the learned logits over the seeds (CLIP's is at most d, Prop. C.1).\n"
        "I(X;Y): " + ", ".join(f"seed {seed} {value:.4f}" for seed, value in information.items()) + "\n"
    )
    print(wpse_toy.format_gap_table(rows))
    settings = {key: getattr(args, key) for key in ("seeds", "steps", "items", "dim")}
    settings.update(lr=wpse_toy.LEARNING_RATE, mean_gaps=wpse_toy.mean_gaps(rows))
    write_toy_outputs(args.out, "wpse_toy", rows, settings, wpse_toy.plot_gaps)
    return 0
