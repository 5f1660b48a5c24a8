"""Shard reading, decoding and augmentation throughput: the hand-written tar reader against the webdataset
library's, on the same generated shards, and kornia's augmentations on the CPU.

For each reader (`WebDatasetShards(reader="tarfile" | "webdataset")`) and number of DataLoader workers, every
sample of the shards is read, its JPEG decoded and resized to 224 x 224 (shorter side, then the centre, as for
the hf: backbones) and batched by `collate_samples`; the samples (index, caption, image checksum) and the skip
counts of the two readers are compared. One shard holds two bad samples, so both must report them. The
augmentation row times the `crop` and `simclr` presets on batches of 64 decoded images.

    python benchmarks/webdataset_reader.py            # writes benchmarks/results/webdataset_reader.json
"""

from __future__ import annotations

import argparse
import functools
import io
import tarfile
import tempfile
import time
from pathlib import Path

import numpy as np
import torch
from PIL import Image
from timing import write_report
from torch.utils.data import DataLoader

from uncurated.data import Augmentation, SkipReport, WebDatasetShards, collate_samples


def write_shards(folder: Path, shards: int, per_shard: int, side: int) -> str:
    """JPEG photographs-sized noise images (side x side * 4/3) with captions; shard 0 holds 2 bad samples."""
    rng = np.random.default_rng(0)
    for shard in range(shards):
        with tarfile.open(folder / f"{shard:05d}.tar", "w") as tar:
            for position in range(per_shard):
                key = f"{shard:05d}{position:04d}"
                pixels = rng.integers(0, 256, size=(side, side * 4 // 3, 3), dtype=np.uint8)
                buffer = io.BytesIO()
                Image.fromarray(pixels).save(buffer, "JPEG", quality=90)
                image = buffer.getvalue()
                if shard == 0 and position in (3, 7):
                    image = image[: len(image) // 3]  # truncated
                for name, content in ((f"{key}.jpg", image), (f"{key}.txt", f"a photo number {key}".encode())):
                    info = tarfile.TarInfo(name)
                    info.size = len(content)
                    tar.addfile(info, io.BytesIO(content))
    return str(folder / f"{{00000..{shards - 1:05d}}}.tar")


def read(pattern: str, reader: str, workers: int, per_shard: int) -> dict:
    dataset = WebDatasetShards(
        pattern,
        size=224,
        resize="crop",
        reader=reader,
        samples_per_shard=per_shard,
        report=SkipReport(max_fraction=1.0),
    )
    loader = DataLoader(
        dataset,
        batch_size=64,
        num_workers=workers,
        collate_fn=functools.partial(collate_samples, report=dataset.report),
    )
    skips, seen = SkipReport(max_fraction=1.0), []
    started = time.perf_counter()
    for batch in loader:
        skips.merge(batch.pop("skips"))
        seen += [
            (int(i), c, round(float(image.sum()), 2))
            for i, c, image in zip(batch["index"], batch["caption"], batch["image"], strict=True)
        ]
    seconds = time.perf_counter() - started
    return {"seconds": seconds, "samples": sorted(seen), "skips": dict(skips.counts)}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--shards", type=int, default=4)
    parser.add_argument("--per-shard", type=int, default=200)
    parser.add_argument("--side", type=int, default=256)
    parser.add_argument("--workers", type=int, nargs="+", default=[0, 1, 2])
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "webdataset_reader.json")
    args = parser.parse_args()
    torch.set_num_threads(1)  # one core a reader: the figures are per worker
    results = {}
    with tempfile.TemporaryDirectory() as folder:
        pattern = write_shards(Path(folder), args.shards, args.per_shard, args.side)
        runs = {}
        for workers in args.workers:
            for reader in ("tarfile", "webdataset"):
                run = read(pattern, reader, workers, args.per_shard)
                runs[reader, workers] = run
                rate = len(run["samples"]) / run["seconds"]
                results[f"{reader}, {workers} workers"] = {
                    "samples_per_second": round(rate, 1),
                    "samples_per_second_per_worker": round(rate / max(workers, 1), 1),
                    "samples": len(run["samples"]),
                    "skips": run["skips"],
                }
                print(reader, workers, results[f"{reader}, {workers} workers"], flush=True)
        first = args.workers[0]
        results["same_samples_and_skips"] = all(
            runs["tarfile", w]["samples"] == runs["webdataset", w]["samples"] == runs["tarfile", first]["samples"]
            and runs["tarfile", w]["skips"] == runs["webdataset", w]["skips"]
            for w in args.workers
        )
        images = next(
            iter(
                DataLoader(
                    WebDatasetShards(
                        pattern,
                        size=224,
                        resize="crop",
                        samples_per_shard=args.per_shard,
                        report=SkipReport(max_fraction=1.0),
                    ),
                    batch_size=64,
                    collate_fn=collate_samples,
                )
            )
        )["image"]
    for preset in ("crop", "simclr"):
        augment = Augmentation(preset, seed=0)
        augment(images)  # builds the kornia transforms
        started = time.perf_counter()
        for _ in range(3):
            augment(images)
        results[f"augment {preset}, 1 thread"] = {
            "images_per_second": round(3 * len(images) / (time.perf_counter() - started), 1)
        }
        print(preset, results[f"augment {preset}, 1 thread"], flush=True)
    write_report(
        args.out,
        "webdataset_reader",
        {
            "shards": args.shards,
            "samples_per_shard": args.per_shard,
            "jpeg_size": [args.side, args.side * 4 // 3],
            "decoded_size": 224,
            "note": "2 CPU cores shared with other jobs; one torch thread per process",
        },
        results,
    )


if __name__ == "__main__":
    main()
