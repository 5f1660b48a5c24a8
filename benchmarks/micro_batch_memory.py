"""Peak memory of one training step against the batch size, with and without ``micro_batch_size``.

A fixed encoder with random weights, float32, embeds two views of B random
images (``--encoder``, both by default):

* ``mlp``: an MLP 784 -> 1024 -> 1024 -> 256 with LayerNorm, d = 256;
* ``resnet``: the default two-view run's image tower, built by the trainer's
  own :func:`uncurated.train.builders.build_model` from the default preset
  (``fashion-mnist``: the small ResNet of widths 16-32-64, one block per
  stage, 2 x 2 grid pooling, then the two-layer projection head to d = 128)
  on 1 x 28 x 28 images. It has batch norm: with micro-batches each one is
  normalized with its own statistics (as in training), which changes the
  gradient, not the memory.

No augmentation runs (its memory is one micro-batch of images). The step is
the trainer's: gradient caching
(:class:`uncurated.train.gradient_cache.GradientCache`) with micro-batches
of ``--micro-batch-size`` (256), the tiled CLIP loss (``infonce``,
``tiling="always"``) on all the embeddings, and the replayed backward pass;
``whole`` rows embed the batch at once. Each configuration runs in a fresh
subprocess, which first runs one step at B = micro_batch_size (so libraries'
lazy buffers are not counted), then sets its peak resident size back to the
current one (``/proc/self/clear_refs``, Linux); the step's peak memory is the
child's peak resident size during the measured step (``VmHWM``) minus its
resident size before it (inputs, model, libraries excluded). Without the
reset the warm-up step's own peak would be subtracted too, and a micro-batch
step, whose working memory is the warm-up's, would count only what it holds
beyond that. The child runs with ``MALLOC_MMAP_THRESHOLD_=65536``, so glibc
returns every freed block of 64 KiB or more to the system and the resident
peak is torch's live memory, not the allocator's retained fragments (with the
default, glibc's adaptive threshold keeps 16-32 MiB blocks in its heap and the
figure depends on the order of frees). Time is recorded for one step, as an
indication only (the load average is recorded too).

The goal: peak at B = 16,384 at most 1.5x the peak at B = 1,024.

    python benchmarks/micro_batch_memory.py                       # both encoders, B in {1024, 4096, 16384}
    python benchmarks/micro_batch_memory.py --encoder resnet      # one encoder
    python benchmarks/micro_batch_memory.py --batches 1024 4096   # fewer sizes
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import time
from pathlib import Path

import torch
from timing import write_report  # the sibling module benchmarks/timing.py
from torch import nn

IMAGE, HIDDEN, EMBEDDING = 784, 1024, 256
FASHION_MNIST = (1, 28, 28)
"""The shape of one image of the default preset's data set."""
ENCODERS = ("mlp", "resnet")


def encoder(name: str) -> tuple[nn.Module, tuple[int, ...], str]:
    """The encoder ``name`` (one of ``ENCODERS``) with random weights, the shape of one input, and its description."""
    torch.manual_seed(0)
    if name == "mlp":
        return (
            nn.Sequential(
                nn.Linear(IMAGE, HIDDEN),
                nn.LayerNorm(HIDDEN),
                nn.GELU(),
                nn.Linear(HIDDEN, HIDDEN),
                nn.LayerNorm(HIDDEN),
                nn.GELU(),
                nn.Linear(HIDDEN, EMBEDDING),
            ),
            (IMAGE,),
            f"MLP {IMAGE}-{HIDDEN}-{HIDDEN}-{EMBEDDING}, LayerNorm, float32",
        )
    from uncurated.train.builders import build_model
    from uncurated.train.config import load_config

    config = load_config([])  # the default preset, as ``uncurated train`` with no arguments
    model = build_model(config, [{"image": torch.zeros(FASHION_MNIST)}])
    return (
        model,
        FASHION_MNIST,
        (
            f"preset {config.preset}'s image tower: ResNet widths {config.widths}, blocks {config.blocks}, "
            f"pool {config.pool}, batch norm, projection to {config.projection_dim} ({config.projection_layers} "
            f"layers); {' x '.join(map(str, FASHION_MNIST))} images, float32"
        ),
    )


def embedding_dim(model: nn.Module, shape: tuple[int, ...]) -> int:
    with torch.no_grad():
        return model.eval()(torch.zeros(2, *shape)).shape[1]


def resident_kib(field: str) -> int:
    """This process's ``VmRSS`` (resident now) or ``VmHWM`` (most resident since the last reset), in KiB."""
    with open("/proc/self/status") as status:
        return next(int(line.split()[1]) for line in status if line.startswith(f"{field}:"))


def reset_peak_resident() -> int:
    """Set the peak resident size back to the current one (Linux >= 4.0) and return it, in bytes."""
    with open("/proc/self/clear_refs", "w") as clear_refs:
        clear_refs.write("5")
    return resident_kib("VmRSS") * 1024


def child(config: dict) -> dict:
    from uncurated import objectives
    from uncurated.train.gradient_cache import GradientCache

    torch.set_num_threads(config["threads"])
    (model, shape, _), loss = encoder(config["encoder"]), objectives.build("infonce", tiling="always")
    generator = torch.Generator().manual_seed(1)
    first, second = (torch.randn(config["batch"], *shape, generator=generator) for _ in range(2))

    def embed_part(part: slice):
        return model(first[part]), model(second[part])

    warm = slice(0, min(config["batch"], config["micro_batch_size"] or 256))
    loss(*embed_part(warm)).backward()
    model.zero_grad(set_to_none=True)
    before = reset_peak_resident()
    start = time.perf_counter()
    if config["micro_batch_size"]:
        cache = GradientCache(model, config["micro_batch_size"])
        a, b = cache.embed(embed_part, config["batch"])
        a.requires_grad_()
        b.requires_grad_()
        loss(a, b).backward()
        cache.backward(a.grad, b.grad)
    else:
        loss(*embed_part(slice(None))).backward()
    seconds = time.perf_counter() - start
    peak = resident_kib("VmHWM") * 1024 - before
    return {"peak_bytes": peak, "seconds": seconds}


def measure(config: dict) -> dict:
    command = [sys.executable, __file__, "--child", json.dumps(config)]
    finished = subprocess.run(
        command,
        capture_output=True,
        text=True,
        env={**os.environ, "OMP_NUM_THREADS": "1", "MALLOC_MMAP_THRESHOLD_": "65536"},
    )
    if finished.returncode != 0:
        return {**config, "status": "failed", "reason": finished.stderr.strip().splitlines()[-1][:200]}
    # The 1-minute load average as the child ends: what else ran beside the measured step's one thread.
    return {
        **config,
        "status": "ok",
        **json.loads(finished.stdout.strip().splitlines()[-1]),
        "load_average_1min": os.getloadavg()[0],
    }


def growth(rows: list[dict], dim: int) -> dict:
    """Peak at the largest B over peak at the smallest, with micro-batches, and what grows with B."""
    micro = {row["batch"]: row["peak_bytes"] for row in rows if row["micro_batch_size"] and row["status"] == "ok"}
    if len(micro) < 2:
        return {
            "peak_ratio_largest_to_smallest": None,
            "growth_bytes_per_sample": None,
            "growth_in_embedding_buffers": None,
        }
    slope = (micro[max(micro)] - micro[min(micro)]) / (max(micro) - min(micro))
    # What grows with B: bytes per sample, and as a count of float32 (B, d) buffers (an embedding, a gradient).
    return {
        "peak_ratio_largest_to_smallest": micro[max(micro)] / micro[min(micro)],
        "growth_bytes_per_sample": slope,
        "growth_in_embedding_buffers": slope / (4 * dim),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--encoder", choices=ENCODERS, nargs="+", default=list(ENCODERS))
    parser.add_argument("--batches", type=int, nargs="+", default=[1024, 4096, 16384])
    parser.add_argument(
        "--whole-batches",
        type=int,
        nargs="*",
        default=[1024, 4096],
        help="sizes also measured without micro-batches, for comparison",
    )
    parser.add_argument("--micro-batch-size", type=int, default=256)
    parser.add_argument("--threads", type=int, default=1)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "micro_batch_memory.json")
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(json.loads(args.child))))
        return
    load_start = os.getloadavg()
    rows, encoders = [], {}
    for name in args.encoder:
        model, shape, description = encoder(name)
        dim = embedding_dim(model, shape)
        configs = [
            {"encoder": name, "batch": b, "micro_batch_size": args.micro_batch_size, "threads": args.threads}
            for b in args.batches
        ]
        configs += [
            {"encoder": name, "batch": b, "micro_batch_size": 0, "threads": args.threads} for b in args.whole_batches
        ]
        measured = []
        for config in configs:
            row = measure(config)
            measured.append(row)
            mode = f"micro {row['micro_batch_size']}" if row["micro_batch_size"] else "whole"
            ok = row["status"] == "ok"
            shown = f"{row['peak_bytes'] / 2**20:.0f} MiB, {row['seconds']:.1f} s" if ok else row["reason"]
            print(f"{name:>6} B = {row['batch']:>6} {mode:>9}: {shown}", flush=True)
        summary = growth(measured, dim)
        if summary["peak_ratio_largest_to_smallest"] is not None:
            print(
                f"{name}: peak at B = {max(args.batches)} / peak at B = {min(args.batches)}: "
                f"{summary['peak_ratio_largest_to_smallest']:.2f} (goal <= 1.5); growth "
                f"{summary['growth_bytes_per_sample']:.0f} bytes per sample = "
                f"{summary['growth_in_embedding_buffers']:.1f} float32 (B, {dim}) buffers"
            )
        encoders[name] = {"description": description, "embedding_dim": dim, **summary}
        rows += measured
    settings = {
        "objective": "infonce, tiled",
        "encoders": encoders,
        "load_average_start": load_start,
        "load_average_end": os.getloadavg(),
    }
    write_report(args.out, "micro_batch_memory", settings, {"rows": rows})


if __name__ == "__main__":
    main()
