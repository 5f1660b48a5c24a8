"""``uncurated toy nuclr``: generalization error of MLE, GCL and learned popularities against n (Wang et al. 2025)."""

from __future__ import annotations

import argparse
import sys
import time

from ... import toy_defaults
from ..arguments import Number
from ..outputs import write_toy_outputs

NAME = "nuclr"
HELP = "NUCLR's toy: generalization error of MLE, GCL and learned popularities against n"
DESCRIPTION = (
    "NUCLR's toy experiment (Wang et al. 2025, Sec. 3.3 and App. G.1). Anchors x are uniform on the upper "
    "half unit disk, contrasts y ~ p(y|x) = exp(x.y/tau)/Z(x) on [0, 1]^2 with an exact Z. For each "
    "sample size n, compare three empirical risks with the true risk L: MLE (Eq. 2, exact partition "
    "function), GCL (Eq. 5 with the uniform q~ = n) and NUCLR (Eq. 5 with q~ = exp(zeta*/tau) from "
    "Eq. 8). Prints |L_hat - L| per n and temperature, and writes nuclr_toy.png and nuclr_toy.json."
)


OPTIONS = (
    Number("--tau", "temperatures of the true model, one panel each", (0.2, 1.0), many=True, metavar="TAU"),
    Number("--sizes", "numbers of training pairs", toy_defaults.NUCLR_SIZES, low=2, many=True, metavar="N"),
    Number("--seed", "seed of every draw", 0, low=0),
    Number("--seeds", "average the errors over K seeds, seed .. seed + K - 1", 5, low=1, metavar="K"),
    Number(
        "--fresh-pairs", "fresh pairs that estimate the true risk L", toy_defaults.NUCLR_FRESH_PAIRS, low=1, metavar="N"
    ),
)


def run(args: argparse.Namespace) -> int:
    from ...theory import nuclr_toy

    start = time.perf_counter()
    rows = []
    for tau in args.tau:
        runs = []
        for seed in range(args.seed, args.seed + args.seeds):

            def report(row: nuclr_toy.ToyRow, seed: int = seed) -> None:
                elapsed = time.perf_counter() - start
                print(
                    f"toy nuclr: tau = {row.tau:g}, n = {row.n}, seed {seed} done ({elapsed:.1f} s elapsed)",
                    file=sys.stderr,
                )

            runs.append(nuclr_toy.run_toy(tau, args.sizes, seed, fresh_pairs=args.fresh_pairs, progress=report))
        rows += nuclr_toy.average_over_seeds(runs)
    print(
        "NUCLR toy (Wang et al. 2025, Sec. 3.3): x uniform on the upper half disk, y ~ exp(x.y/tau)/Z(x) on [0, 1]^2.\n"
        f"Each cell is |L_hat - L|, L the true risk (Eq. 3) on {args.fresh_pairs} fresh pairs, averaged over\n"
        f"{args.seeds} seed(s) from {args.seed}.\n"
        "MLE: Eq. 2 with the exact partition function. GCL: Eq. 5 with q~ = n. NUCLR: Eq. 5 with\n"
        "q~ = exp(zeta*/tau) from Eq. 8, scaled to the largest true popularity q (App. G.1).\n"
    )
    print(nuclr_toy.format_table(rows))
    settings = {
        "seed": args.seed,
        "seeds": args.seeds,
        "fresh_pairs": args.fresh_pairs,
        "taus": args.tau,
        "sizes": args.sizes,
    }
    write_toy_outputs(args.out, "nuclr_toy", rows, settings, nuclr_toy.plot_errors)
    return 0
