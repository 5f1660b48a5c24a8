"""Where the ResNet's channels_last format pays on the CPU, and where oneDNN's AVX2 kernels fault in it.

Two parts, in one run:

1. **Step cost.** Forward and backward of the ResNet alone (no augmentation, head or objective) at batch 256 on
   28 x 28 images, in the channels_last and the contiguous formats, interleaved, at each width of the presets:
   the median wall seconds per step and the speedup of channels_last.
2. **Faults.** One stride-2 1 x 1 convolution (a ResNet's shortcut) in channels_last, forward and backward, with
   1 to 12 input channels, each in its own process under ``ONEDNN_MAX_CPU_ISA=AVX2`` (the path of CPUs without
   AVX-512) and one thread: its exit status, and whether its gradients agree with the contiguous format's.

    python benchmarks/memory_format.py

Writes ``benchmarks/results/memory_format.json`` (``--out``).
"""

from __future__ import annotations

import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from timing import write_report  # the sibling module benchmarks/timing.py

from uncurated.models.resnet import ResNet

#: The widths of the presets' two-view encoders (fashion-mnist's, the default network's).
WIDTHS = ((16, 32, 64), (32, 64, 128))

#: One shortcut convolution in channels_last and in the contiguous format: prints "agree" or "differ".
SHORTCUT = """
import sys, torch
from torch import nn
channels = int(sys.argv[1])
torch.manual_seed(0)
weight, images = torch.randn(2 * channels, channels, 1, 1), torch.randn(64, channels, 28, 28)
gradients = []
for memory_format in (torch.channels_last, torch.contiguous_format):
    conv = nn.Conv2d(channels, 2 * channels, 1, stride=2, bias=False).to(memory_format=memory_format)
    conv.weight.data.copy_(weight)
    x = images.clone().contiguous(memory_format=memory_format).requires_grad_(True)
    for _ in range(3):
        conv(x).square().sum().backward()
    gradients.append((x.grad, conv.weight.grad))
same = all(torch.allclose(a, b, rtol=1e-4, atol=1e-4 * float(b.abs().max())) for a, b in zip(*gradients))
print("agree" if same else "differ")
"""


def step_seconds(widths: tuple[int, ...], repeats: int) -> dict[str, float]:
    """Median seconds of a forward and backward step in each format, the two formats' steps interleaved."""
    images = torch.rand(256, 1, 28, 28)
    models = {}
    for name, memory_format in (("channels_last", torch.channels_last), ("contiguous", torch.contiguous_format)):
        torch.manual_seed(0)
        model = ResNet(1, widths, (1,) * len(widths), pool="grid").to(memory_format=memory_format)
        model.memory_format = memory_format
        models[name] = model
    times: dict[str, list[float]] = {name: [] for name in models}
    for index in range(repeats + 2):
        for name, model in models.items():
            start = time.perf_counter()
            model(images).sum().backward()
            if index >= 2:  # the first two steps warm up
                times[name].append(time.perf_counter() - start)
    medians = {name: statistics.median(values) for name, values in times.items()}
    return {**medians, "channels_last_speedup": medians["contiguous"] / medians["channels_last"]}


def shortcut_fault(channels: int) -> dict[str, object]:
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2", OMP_NUM_THREADS="1")
    result = subprocess.run(
        [sys.executable, "-c", SHORTCUT, str(channels)], env=env, capture_output=True, text=True, timeout=300
    )
    last = (result.stderr.strip().splitlines() or [""])[-1]
    return {"exit_status": result.returncode, "result": result.stdout.strip() or last}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    parser.add_argument("--repeats", type=int, default=10)
    parser.add_argument("--out", type=Path, default=Path(__file__).parent / "results" / "memory_format.json")
    args = parser.parse_args()
    started = time.perf_counter()
    cost = {"x".join(map(str, widths)): step_seconds(widths, args.repeats) for widths in WIDTHS}
    faults = {channels: shortcut_fault(channels) for channels in range(1, 13)}
    for widths, row in cost.items():
        print(f"widths {widths}: channels_last {row['channels_last_speedup']:.2f}x faster")
    for channels, row in faults.items():
        print(f"{channels} input channels: exit {row['exit_status']}, {row['result']}")
    settings = {
        "cpu_capability": torch.backends.cpu.get_cpu_capability(),
        "cores": os.cpu_count(),
        "load_average": os.getloadavg(),
        "wall_seconds": time.perf_counter() - started,
        "batch_size": 256,
        "repeats": args.repeats,
    }
    write_report(args.out, "memory_format", settings, {"step_seconds": cost, "avx2_shortcut_faults": faults})


if __name__ == "__main__":
    main()
