"""One training step of each full-size hf: backbone on the CPU: forward, backward and AdamW, time and memory.

Each configuration is built by `uncurated.train.builders.build_model` from its preset-like keys (random weights,
nothing downloaded) and trained with CLIP's loss (image-text) or NT-Xent (two views) on random 224 x 224 RGB
images and short captions, batch 8 (a two-view step embeds 2 x 8 images). The median of `--repeats` steps after
one warm-up step is reported with
the process's peak resident memory (which only grows, so the kinds run in order of size, one per process).

    python benchmarks/backbone_step_time.py                 # every kind, one process each
    python benchmarks/backbone_step_time.py --kinds vit     # one kind
"""

from __future__ import annotations

import argparse
import json
import os
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch
from timing import median_seconds, write_report

#: name: (pipeline, image encoder, text encoder)
KINDS = {
    "resnet50-distilbert": ("image_text", "hf:resnet", "hf:distilbert"),
    "vit-b16-clip-text": ("image_text", "hf:vit", "hf:clip-text"),
    "clip-vision-b32": ("two_view", "hf:clip-vision", None),
    "siglip-vision-b16": ("two_view", "hf:siglip-vision", None),
    "resnet50": ("two_view", "hf:resnet", None),
    "vit-b16": ("two_view", "hf:vit", None),
    "bert-base-text": ("image_text", "mlp", "hf:bert"),
}
BATCH = 8
SIZE = 224
CAPTIONS = [
    f"a photo of a {word} on a table next to a window, number {i}"
    for i, word in enumerate(["cat", "dog", "cup", "car", "tree", "book", "lamp", "shoe"])
]


def measure(kind: str, repeats: int) -> dict:
    from uncurated.objectives import build as build_objective
    from uncurated.train import load_config
    from uncurated.train.builders import build_model

    pipeline, image, text = KINDS[kind]
    keys = [
        f"pipeline={pipeline}",
        f"image_encoder={image}",
        "image_mode=RGB",
        f"image_size={SIZE}",
        "projection_dim=256",
        "projection_layers=1",
        "probe_layer=encoder",
        "widths=[64]",
        "vocab_size=30522",
        "max_caption_length=32",
    ]
    if text:
        keys.append(f"text_encoder={text}")
    config = load_config(keys)

    class Data(torch.utils.data.Dataset):
        captions = CAPTIONS * 200

        def __len__(self):
            return 1

        def __getitem__(self, index):
            return {"image": torch.zeros(3, SIZE, SIZE)}

    torch.manual_seed(0)
    started = time.perf_counter()
    model = build_model(config, Data()).train()
    build_seconds = time.perf_counter() - started
    loss = build_objective("infonce", pairing="cross" if pipeline == "image_text" else "two_view")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    images = torch.rand(BATCH, 3, SIZE, SIZE)

    def step():
        if pipeline == "image_text":
            a, b = model(images, CAPTIONS)
        else:
            a, b = model.embed_views(images, images.flip(3))
        value = loss(a.float(), b.float())
        optimizer.zero_grad(set_to_none=True)
        value.backward()
        optimizer.step()

    seconds = median_seconds(step, repeats, warmup=1)
    return {
        "seconds_per_step": round(seconds, 3),
        "samples_per_second": round(BATCH / seconds, 2),  # pairs (image-text) or images of two views each
        "parameters_millions": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
        "peak_resident_gib": round(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20, 2),
        "build_seconds": round(build_seconds, 1),
        "load_average_1min": round(os.getloadavg()[0], 1),  # the 2 cores are shared: above 2, others wait
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--kinds", nargs="+", choices=KINDS, default=list(KINDS))
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--one", choices=KINDS, help=argparse.SUPPRESS)  # a child process measuring one kind
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "backbone_step_time.json")
    args = parser.parse_args()
    if args.out.is_file() and not args.one:  # measuring some kinds again keeps the others' rows
        previous = json.loads(args.out.read_text())["results"]
    else:
        previous = {}
    if args.one:
        print(json.dumps(measure(args.one, args.repeats)))
        return
    results = dict(previous)
    for kind in args.kinds:
        child = subprocess.run(
            [sys.executable, __file__, "--one", kind, "--repeats", str(args.repeats)],
            capture_output=True,
            text=True,
            check=True,
        )
        results[kind] = json.loads(child.stdout.strip().splitlines()[-1])
        print(kind, results[kind], flush=True)
    write_report(
        args.out,
        "backbone_step_time",
        {"batch": BATCH, "image_size": SIZE, "repeats": args.repeats, "note": "2 CPU cores shared with other jobs"},
        results,
    )


if __name__ == "__main__":
    main()
