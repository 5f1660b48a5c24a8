"""Time of the WPSE similarity (random-feature form, Eq. 8) relative to cosine similarity.

For a batch of B pairs, each side a set of M points in R^d:

* ``cosine``: L2-normalize one vector per sample (the first point) and form
  the B x B matrix of inner products;
* ``wpse``: the Eq. 8 vectors of both sides from one draw of D random
  features (pooling the weighted points and their features), then the B x B
  matrix of inner products;
* ``wpse_exact``: Eq. 6 directly (only for small B, as a reference).

Each is timed forward and forward + backward (a scalar sum of the matrix),
median over repeats, in one run. Prints a table and writes JSON
(``--out``, default ``benchmarks/results/wpse_similarity.json``).

    python benchmarks/wpse_similarity.py --batch 1024 --points 16 --dim 128 --features 1024
"""

from __future__ import annotations

import argparse
import functools
from pathlib import Path

import torch
import torch.nn.functional as F
from timing import median_seconds, write_report  # the sibling module benchmarks/timing.py

from uncurated.similarity import CombinedKernel, IMQKernel, WeightedPointSet, WPSEmbedding


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=1024)
    parser.add_argument("--points", type=int, default=16)
    parser.add_argument("--dim", type=int, default=128)
    parser.add_argument("--features", type=int, default=1024, help="random features D (the paper trains with 1024)")
    parser.add_argument("--repeats", type=int, default=20)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/wpse_similarity.json"))
    args = parser.parse_args()
    generator = torch.Generator().manual_seed(0)
    shape = (args.batch, args.points, args.dim)
    tokens = [torch.randn(shape, generator=generator) for _ in range(2)]
    weights = [torch.randn(shape[:2], generator=generator) for _ in range(2)]
    embedding = WPSEmbedding(CombinedKernel(1.0, 1.0, IMQKernel(0.5)), train_features=args.features)

    def cosine(backward: bool) -> None:
        x, y = (t[:, 0].clone().requires_grad_(backward) for t in tokens)
        similarity = F.normalize(x, dim=-1) @ F.normalize(y, dim=-1).T
        if backward:
            similarity.sum().backward()

    def wpse(backward: bool) -> None:
        sets = [
            WeightedPointSet(
                w.clone().requires_grad_(backward), F.normalize(t.clone().requires_grad_(backward), dim=-1)
            )
            for w, t in zip(weights, tokens, strict=True)
        ]
        x, y = embedding(*sets)
        similarity = x @ y.T
        if backward:
            similarity.sum().backward()

    rows = {}
    for name, step in (("cosine", cosine), ("wpse", wpse)):
        rows[name] = {
            "forward_seconds": median_seconds(functools.partial(step, False), args.repeats),
            "forward_backward_seconds": median_seconds(functools.partial(step, True), args.repeats),
        }
    for name in rows:
        for kind in ("forward", "forward_backward"):
            rows[name][f"{kind}_ratio_to_cosine"] = rows[name][f"{kind}_seconds"] / rows["cosine"][f"{kind}_seconds"]
    print(f"B={args.batch} M={args.points} d={args.dim} D={args.features}")
    print(f"{'similarity':>10} {'fwd ms':>9} {'x cos':>7} {'fwd+bwd ms':>11} {'x cos':>7}")
    for name, row in rows.items():
        print(
            f"{name:>10} {1e3 * row['forward_seconds']:>9.2f} {row['forward_ratio_to_cosine']:>7.1f} "
            f"{1e3 * row['forward_backward_seconds']:>11.2f} {row['forward_backward_ratio_to_cosine']:>7.1f}"
        )
    settings = {"batch": args.batch, "points": args.points, "dim": args.dim, "features": args.features}
    write_report(args.out, "wpse_similarity", settings, rows)


if __name__ == "__main__":
    main()
