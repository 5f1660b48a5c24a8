"""What Triton's Python launcher costs per kernel call, with the kernels' real argument lists, measured on the CPU.

A GPU call ``kernel[grid](**arguments)`` runs, before the driver's ``cuLaunchKernel``, Triton's binder (the
generated function that binds the arguments and specializes each runtime one: type, alignment of a pointer,
divisibility of an integer), the lookup of the compiled kernel by that specialization, and the C launcher that
packs the values. The binder and the lookup are Python, independent of the device: this script builds them as
``JITFunction.run`` does for an H100 target (``make_backend(GPUTarget("cuda", 90, 32))``) and times them on the
very argument dictionaries the kernels were launched with in a training step of each objective (captured under
the interpreter, B = 64, d = 32, float32). Not timed, for want of a GPU: the C launcher's packing (a fixed cost
per flattened argument, in C) and the driver call; the uncurated code that builds the argument dictionaries.

    python benchmarks/triton_launcher.py    # about a minute on 2 cores; writes results/triton_launcher.json
"""

from __future__ import annotations

import json
import os
import platform
import statistics
import sys
import time
from pathlib import Path

import torch

os.environ.setdefault("TRITON_INTERPRET", "1")  # the steps that capture the arguments run on the CPU

sys.path.insert(0, str(Path(__file__).parent))
from triton_kernels import NAMES, PAIRINGS, build, features, step  # noqa: E402

from uncurated.objectives.tiled.kernels import function  # noqa: E402

RESULTS = Path(__file__).parent / "results"
REPEATS = 2000
ROUNDS = 7


def captured_launches(name: str, pairing: str) -> list[tuple[object, dict, int]]:
    """``(kernel, arguments, warps)`` of every launch of one training step (the second) of ``name``."""
    captured = []
    original = function.launch

    def capture(kernel, grid, arguments, warps, stages=None):
        captured.append((kernel, dict(arguments), warps))
        original(kernel, grid, arguments, warps, stages)

    objective = build(name, pairing, 64)
    a, b = features(64, 32)
    step(objective, a, b, torch.arange(64))
    function.launch = capture
    try:
        step(objective, a, b, torch.arange(64))
    finally:
        function.launch = original
    return captured


def cuda_binder(kernel):
    """The binder and cache-key function ``JITFunction.run`` uses for an H100, for ``kernel``'s Python function."""
    from triton.backends.compiler import GPUTarget
    from triton.compiler import make_backend
    from triton.runtime.jit import JITFunction, compute_cache_key, create_function_from_signature

    compiled = JITFunction(kernel.fn)
    backend = make_backend(GPUTarget("cuda", 90, 32))
    binder = create_function_from_signature(compiled.signature, compiled.params, backend)
    key_cache: dict = {}

    def bind(arguments: dict, warps: int):
        bound, specialization, options = binder(**arguments, num_warps=warps)
        compute_cache_key(key_cache, specialization, options)
        return tuple(bound.values()), specialization

    return bind


def _leaves(specialization) -> tuple[int, int]:
    """Runtime and constexpr values among the flattened arguments."""
    runtime = constant = 0
    for kind, _ in specialization:
        if isinstance(kind, tuple):
            inner = _leaves([(k, None) for k in kind])
            runtime, constant = runtime + inner[0], constant + inner[1]
        elif kind == "constexpr":
            constant += 1
        else:
            runtime += 1
    return runtime, constant


def timed(kernel, arguments: dict, warps: int) -> dict:
    bind = cuda_binder(kernel)
    _, specialization = bind(arguments, warps)
    means = []
    for _ in range(ROUNDS):
        start = time.perf_counter()
        for _ in range(REPEATS):
            bind(arguments, warps)
        means.append((time.perf_counter() - start) / REPEATS)
    runtime, constant = _leaves(specialization)
    return {
        "kernel": kernel.fn.__name__,
        "parameters": len(arguments),
        "runtime_values": runtime,
        "constexpr_values": constant,
        "binding_us": round(statistics.median(means) * 1e6, 2),
        "binding_us_min": round(min(means) * 1e6, 2),
    }


def main() -> None:
    import triton

    rows = []
    for name in NAMES:
        for pairing in PAIRINGS:
            for kernel, arguments, warps in captured_launches(name, pairing):
                row = {"objective": name, "pairing": pairing, **timed(kernel, arguments, warps)}
                rows.append(row)
                print(
                    f"{name:9s} {pairing:9s} {row['kernel']:17s} {row['parameters']:3d} parameters "
                    f"({row['runtime_values']} runtime, {row['constexpr_values']} constexpr): "
                    f"{row['binding_us']:6.1f} us per call",
                    flush=True,
                )
    summary = {
        kernel: {
            "median_binding_us": round(statistics.median(r["binding_us"] for r in rows if r["kernel"] == kernel), 2),
            "max_binding_us": max(r["binding_us"] for r in rows if r["kernel"] == kernel),
        }
        for kernel in sorted({r["kernel"] for r in rows})
    }
    report = {
        "benchmark": "triton_launcher",
        "timed": "Triton's binder and cache-key lookup (JITFunction.run's Python before the C launcher), H100 target",
        "torch": torch.__version__,
        "triton": triton.__version__,
        "python": platform.python_version(),
        "machine": platform.processor() or platform.machine(),
        "threads": torch.get_num_threads(),
        "load_average": os.getloadavg(),
        "repeats": REPEATS,
        "rounds": ROUNDS,
        "summary": summary,
        "results": rows,
    }
    path = RESULTS / "triton_launcher.json"
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(json.dumps(summary, indent=2))
    print(f"wrote {path}")


if __name__ == "__main__":
    main()
