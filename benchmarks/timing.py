"""What every benchmark script shares: timing by the median of repeats, and a JSON report."""

from __future__ import annotations

import json
import platform
import statistics
import time
from collections.abc import Callable
from pathlib import Path

import torch


def median_seconds(step: Callable[[], object], repeats: int, warmup: int = 3) -> float:
    """The median wall time of ``step`` over ``repeats`` calls, after ``warmup`` untimed ones."""
    for _ in range(warmup):
        step()
    times = []
    for _ in range(repeats):
        start = time.perf_counter()
        step()
        times.append(time.perf_counter() - start)
    return statistics.median(times)


def write_report(path: Path, benchmark: str, settings: dict, results: dict) -> None:
    """Write the results with the machine they were measured on, and say where."""
    report = {
        "benchmark": benchmark,
        "torch": torch.__version__,
        "threads": torch.get_num_threads(),
        "machine": platform.processor() or platform.machine(),
        **settings,
        "results": results,
    }
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {path}")
