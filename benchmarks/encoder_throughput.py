"""Training throughput of the image encoders on 28 x 28 grayscale batches (Fashion-MNIST's shape).

Each encoder is timed for one forward and backward pass in training mode
(batch norm updating its statistics) of a batch of random images through the
encoder and a two-layer projection head to 128 dimensions, the backward pass
of a scalar sum of the embeddings; the median over repeats gives images per
second. Encoders:

* ``resnet-32-64-128``: ``ResNet(widths=(32, 64, 128), blocks=(1, 1, 1))``
* ``resnet-16-32-64``: ``ResNet(widths=(16, 32, 64), blocks=(1, 1, 1))``
* the same two with ``pool="grid"`` (a 2 x 2 grid, 4 times the features)
* ``mlp-512-256``: ``MLP(784, widths=(512, 256))``

Prints a table and writes JSON (``--out``, default
``benchmarks/results/encoder_throughput.json``).

    python benchmarks/encoder_throughput.py --batch 256 --threads 2
"""

from __future__ import annotations

import argparse
from pathlib import Path

import torch
from timing import median_seconds, write_report  # the sibling module benchmarks/timing.py

from uncurated.models import MLP, ProjectionHead, ResNet


def encoders() -> dict[str, torch.nn.Module]:
    return {
        "resnet-32-64-128": ResNet(1, (32, 64, 128), (1, 1, 1)),
        "resnet-16-32-64": ResNet(1, (16, 32, 64), (1, 1, 1)),
        "resnet-32-64-128-grid": ResNet(1, (32, 64, 128), (1, 1, 1), pool="grid"),
        "resnet-16-32-64-grid": ResNet(1, (16, 32, 64), (1, 1, 1), pool="grid"),
        "mlp-512-256": MLP(28 * 28, (512, 256)),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--batch", type=int, default=256)
    parser.add_argument("--threads", type=int, default=2, help="torch intra-op threads (the machine has 2 cores)")
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path("benchmarks/results/encoder_throughput.json"))
    args = parser.parse_args()
    torch.set_num_threads(args.threads)
    torch.manual_seed(0)
    images = torch.rand(args.batch, 1, 28, 28)
    rows = {}
    for name, encoder in encoders().items():
        model = torch.nn.Sequential(encoder, ProjectionHead(encoder.feature_dim, 128)).train()

        def step(model=model) -> None:
            model.zero_grad(set_to_none=True)
            model(images).sum().backward()

        seconds = median_seconds(step, args.repeats)
        rows[name] = {
            "parameters": sum(p.numel() for p in encoder.parameters()),
            "feature_dim": encoder.feature_dim,
            "forward_backward_seconds": seconds,
            "images_per_second": args.batch / seconds,
        }
    print(f"B={args.batch} 1x28x28, forward+backward with a 2-layer head to 128, {args.threads} threads")
    print(f"{'encoder':>22} {'params':>9} {'features':>9} {'ms/batch':>9} {'images/s':>9}")
    for name, row in rows.items():
        print(
            f"{name:>22} {row['parameters']:>9} {row['feature_dim']:>9} "
            f"{1e3 * row['forward_backward_seconds']:>9.1f} {row['images_per_second']:>9.0f}"
        )
    write_report(args.out, "encoder_throughput", {"batch": args.batch}, rows)


if __name__ == "__main__":
    main()
