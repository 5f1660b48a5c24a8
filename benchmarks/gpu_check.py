"""The check to run the first time a CUDA GPU is available: correctness, precision, speed, memory, device hygiene.

``make gpu-check`` runs every check of :data:`CHECKS` and writes one JSON with the device's name
(``benchmarks/results/gpu_check.json``) and a PNG of the loss timings beside it. The JSON is rewritten after every
check (a run killed halfway keeps the checks done, and names those ``pending``), and a check starts only where its
estimated time (:attr:`Check.estimate_seconds`) fits what is left of the budget (``--budget-minutes``, 8 by
default); the others are listed as ``skipped``. A package the Python at hand cannot import fails the check that
needs it, naming the wheel to bring; the script imports torch, numpy and ``uncurated`` (from ``src/``) and nothing
else until a check asks. Without CUDA it refuses, exit status 2. ``--cpu-smoke`` runs the same code at the tiny
sizes of :data:`TINY` on the CPU (``benchmarks/results/gpu_check_cpu.json``), the fused kernels under Triton's
interpreter; ``tests/test_gpu_check.py`` does that in ``make test``, so the script cannot rot before a GPU comes.

The checks (each returns a record with ``passed``):

* ``objectives``: every objective under every entry of :data:`TILINGS` (dense; tiled with the device's
  compile default; tiled uncompiled; fused, the Triton kernels) against the float64 CPU reference of the dense
  engine: value, feature gradients and per-sample state after a training call, at d = 128 and 512 (the fused
  backward's gradient slices, NUCLR's column statistic among them);
* ``precision``: the bf16 contract (:mod:`uncurated.precision`) on the dense, tiled and fused engines: bf16
  features, float32 loss and state, bf16 gradients, within the contract's bounds of float64;
* ``loss_speed``: forward + backward time and peak memory of CLIP and NUCLR on the tiled and fused engines
  (:data:`SPEED_ENGINES`) against open_clip's ``ClipLoss`` (when installed; "does not fit" where it runs out of
  memory) and the matmul floor (``torch.mm``, the same three products), at B = 16,384 and 65,536, d = 512, for
  bfloat16 and float32 features (float32 products through TF32); drawn in the PNG;
* ``kernel_configs``: fused CLIP forward + backward at B = 16,384, d = 512, bfloat16 and float32 (TF32), for the
  launched configuration of the kernels and the candidates of ``kernels/configs.py`` that differ from it in one
  factor (block rows, product step, gradient slice, warps, stages), at most :attr:`Sizes.config_candidates` started
  within :attr:`Sizes.config_seconds` per type (``--config-seconds S``: every candidate started within S): each
  one's time, loss and gradients against the dense engine in float64, the fastest, the launched one's ratio to it,
  and the ``configs.TUNED`` entry to add where the fastest is :data:`TUNE_MARGIN` faster. On the CPU: three
  candidates of distinct block shapes per type under Triton's interpreter, against the dense engine, untimed;
* ``training_step``: one ResNet-50 + DistilBERT step (``hf:`` backbones built from their configuration
  classes, nothing downloaded) in bf16 at batch 256: samples per second and peak memory;
* ``device_hygiene``: a CUDA step runs no operator on host tensors; per-sample state kept on the host
  (``state_device="cpu"``) gives the state kept on the device; in-memory batches come pinned; the CUDA
  generators' states are saved and restored;
* ``distributed``: an NCCL process group (gloo on the CPU) at world size 1 and the collectives the
  trainer uses, in a child process with a timeout.

Another check is one more :class:`Check` in :data:`CHECKS`; another engine is one more entry of
:data:`TILINGS`, which ``objectives`` then covers (and ``loss_speed`` once it is named in :data:`SPEED_ENGINES`).

Time on one H100, estimated from counted work (no GPU has run it): a step at B = 65,536, d = 512 is
B^2 d = 2.2e12 multiply-adds per product. The floor is 3 products (13 ms in bf16 at 989 TFLOP/s, 27 ms in TF32 at
495); the kernels count 12 at d = 512 (``benchmarks/results/triton_work.json``), about 0.1 s in bf16 and 0.2 s in
TF32 at half the peak; the tiled engine about as much, its float32 B x B elementwise passes bound by memory.
Six calls (a warm-up and :attr:`Sizes.repeats`) of six methods, two types, B = 16,384 adding 1/16: about 20 s
timed, plus compiling (each kernel variant a few seconds, ``torch.compile`` of the tiled engine tens of seconds
per objective, type and shape): about 4 minutes for ``loss_speed``, 8 for the whole run before
``kernel_configs``. That one compiles four kernel variants per candidate (1 to 2 s each) and times a step of 6 to
12 ms (bf16 to TF32, at half the peak; a poor candidate a few times that) seven times: 5 to 10 s a candidate, so
the 30 s budget per type starts 4 to 7 of the 8, and with the float64 reference (three B x B x d products, under a
second) it takes about 1.2 minutes: 9 to 9.5 minutes in all before ``objectives`` and ``precision`` gained d = 512
and the fused engine, about 10.5 now (the per-check estimates of :data:`CHECKS`). Within the default 8-minute budget
the correctness checks and ``loss_speed`` run, and the later timings are listed as skipped unless the earlier ones
took less than estimated. B = 262,144 (16 times 65,536's work: about 3 s a fused step, 2 minutes for its calls) is
left out.

    make gpu-check PY=python3                        # the system's CUDA torch, nothing installed; 8-minute budget
    make gpu-check                                   # in .venv (installs the package and its test extras first)
    PYTHONPATH=src python3 benchmarks/gpu_check.py --budget-minutes 15   # everything (about 10 minutes, estimated)
    PYTHONPATH=src python3 benchmarks/gpu_check.py --only kernel_configs --config-seconds 600   # to fill the table
    PYTHONPATH=src python3 benchmarks/gpu_check.py --tiny         # the tiny sizes on the GPU
    PYTHONPATH=src python3 benchmarks/gpu_check.py --cpu-smoke    # the tiny sizes on the CPU (what the tests run)
"""

from __future__ import annotations

import argparse
import json
import math
import os
import platform
import socket
import statistics
import subprocess
import sys
import textwrap
import time
import traceback
from collections.abc import Callable, Iterator
from contextlib import contextmanager
from dataclasses import asdict, dataclass, replace
from pathlib import Path

import torch

if not torch.cuda.is_available():  # before triton is imported: the fused kernels then run under its interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")

from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402

from uncurated import objectives  # noqa: E402
from uncurated.objectives.tiled.kernels import configs as kernel_configs  # noqa: E402
from uncurated.objectives.tiled.kernels import support as kernel_support  # noqa: E402
from uncurated.precision import BFLOAT16_GRADIENT_BOUND, bfloat16_loss_bound  # noqa: E402

RESULTS = Path(__file__).parent / "results"


@dataclass(frozen=True)
class Sizes:
    """How large each check runs."""

    objective_batch: int
    objective_dims: tuple[int, ...]  # d = 512 takes the fused backward's gradient slices (d > 128)
    block: int  # the tile side of the tiled entries of TILINGS (several tiles, uneven at the edge)
    kernel_block: int  # the fused entry's block (a power of two; several blocks, uneven at the edge)
    speed_batches: tuple[int, ...]
    speed_dim: int
    speed_dtypes: tuple[str, ...]
    repeats: int
    step_batch: int
    image_size: int
    tiny_backbones: bool
    config_batch: int  # kernel_configs: fused CLIP at this batch and config_dim...
    config_dim: int
    config_candidates: int  # ...for at most this many candidates per type...
    config_seconds: float  # ...started within this many seconds per type (compiling included)


SPEED_DTYPES = ("bfloat16", "float32")
FULL = Sizes(2048, (128, 512), 700, 64, (16_384, 65_536), 512, SPEED_DTYPES, 5, 256, 224, False, 16_384, 512, 8, 30.0)
TINY = Sizes(24, (8,), 7, 32, (32, 64), 16, SPEED_DTYPES, 1, 4, 32, True, 24, 100, 3, 600.0)
"""Under Triton's interpreter every program of a fused launch costs a Python-level pass over its block operations
(a tenth of a second on a 2-core CPU), so the tiny sizes run the kernels on one block, masked at its edge
(24 of 32 rows; 32 and 64 of the default 64): ``tests/test_triton_kernels.py`` checks them over many blocks.
``kernel_configs`` runs three candidates of distinct block shapes per type at d = 100 (padded to 128: several product
steps, and two gradient slices where a candidate's are 64 wide)."""

TILINGS: dict[str, dict] = {
    "dense": {"tiling": "never"},
    "tiled": {"tiling": "always"},
    "tiled-eager": {"tiling": "always", "compile": False},
    "fused": {"tiling": "triton"},
}
"""The engines every objective is checked under (options of the objective; in ``objectives`` a tiled entry gets
``block_size`` = :attr:`Sizes.block`, the fused one :attr:`Sizes.kernel_block`)."""
SPEED_ENGINES = ("tiled", "fused")
"""The entries of :data:`TILINGS` that ``loss_speed`` times (at their default block sizes)."""

PRECISION_BATCH, PRECISION_DIM = 384, 48
"""The size the bf16 contract's bounds were measured at (:mod:`uncurated.precision`), on every device."""
PRECISION_ENGINES = ("dense", "tiled", "fused")
PRECISION_BLOCKS = {"tiled": {"block_size": 100}, "fused": {"block_size": 128}}
"""The blocks of the precision check's engines: the tiles the bounds were measured with; the kernels' blocks a power
of two, three of them with the last uneven."""
REFERENCE_TOLERANCE = 1e-4
"""float32 on the device against float64 on the CPU: value and per-sample state to this relative error, the
feature gradients to this relative error in norm (the CPU's float32 engine is within 1e-5, ``tests/``)."""
SPEED_OBJECTIVES = ("infonce", "nuclr")
STATEFUL = ("sogclr", "isogclr", "nuclr")
TINY_BACKBONES = [
    "image_encoder.embedding_size=8",
    "image_encoder.hidden_sizes=[8, 16]",
    "image_encoder.depths=[1, 1]",
    "text_encoder.dim=16",
    "text_encoder.n_layers=1",
    "text_encoder.n_heads=2",
    "text_encoder.hidden_dim=32",
    "vocab_size=64",
]


@dataclass
class Context:
    device: torch.device
    sizes: Sizes
    estimated: bool = False
    """Whether each check's :attr:`Check.estimate_seconds` holds (the full sizes on CUDA) and is budgeted for."""


@dataclass(frozen=True)
class Check:
    name: str
    run: Callable[[Context], dict]
    estimate_seconds: float = 0.0
    """Its time on an H100 at the full sizes, estimated from counted work and compile times (never measured): a
    check is started only where it fits what is left of the budget."""


# -- helpers ------------------------------------------------------------------------------------------


def synchronize(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def features(batch: int, dim: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor]:
    """Correlated float64 pairs on the CPU (positives score above negatives, as in training)."""
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(batch, dim, generator=generator, dtype=torch.float64)
    return a, a + 0.8 * torch.randn(batch, dim, generator=generator, dtype=torch.float64)


def build(name: str, batch: int, **options) -> objectives.Objective:
    if name in STATEFUL:
        options["num_samples"] = batch
    if name == "nuclr":
        options.setdefault("freeze_epochs", 0)  # update zeta from the first step
    objective = objectives.build(name, **options)
    objective.set_epoch(0.0)
    return objective


def training_call(objective: objectives.Objective, a: torch.Tensor, b: torch.Tensor) -> dict[str, torch.Tensor]:
    """Value, feature gradients and per-sample state (on the CPU, float64) after one training call."""
    a, b = a.detach().clone().requires_grad_(), b.detach().clone().requires_grad_()
    objective.begin_step()
    value = objective(a, b, index=torch.arange(a.shape[0], device=a.device))
    value.backward()
    found = {"value": value.detach(), "grad_a": a.grad, "grad_b": b.grad}
    state = getattr(objective, "state", None)
    for key in sorted(state.tensors) if state is not None else ():
        found["/".join(key)] = state.tensors[key]
    return {name: tensor.detach().cpu().double() for name, tensor in found.items()}


def relative_error(got: torch.Tensor, want: torch.Tensor) -> float:
    """``|got - want| / max(1, |want|)`` in norm over the finite entries; inf if the non-finite ones differ."""
    finite = torch.isfinite(want)
    if not torch.equal(finite, torch.isfinite(got)) or not torch.equal(got[~finite], want[~finite]):
        return math.inf
    if not finite.any():
        return 0.0
    return float((got[finite] - want[finite]).norm() / max(1.0, float(want[finite].norm())))


def timed(step: Callable[[], object], device: torch.device, repeats: int) -> tuple[float, int | None]:
    """Median seconds of ``step`` after one warm-up call, and the peak memory it allocated above its start (CUDA)."""
    step()
    synchronize(device)
    if device.type == "cuda":
        torch.cuda.reset_peak_memory_stats(device)
        start = torch.cuda.memory_allocated(device)
    times = []
    for _ in range(repeats):
        clock = time.perf_counter()
        step()
        synchronize(device)
        times.append(time.perf_counter() - clock)
    peak = torch.cuda.max_memory_allocated(device) - start if device.type == "cuda" else None
    return statistics.median(times), peak


def out_of_memory(error: BaseException) -> bool:
    return isinstance(error, torch.OutOfMemoryError) or "out of memory" in str(error).lower()


def unavailable(label: str, device: torch.device) -> str | None:
    """Why the engine ``label`` of :data:`TILINGS` cannot run on ``device`` (None: it can)."""
    if TILINGS[label].get("tiling") != "triton":
        return None
    if not kernel_support.importable():
        return f"triton is not installed ({kernel_support.INSTALL_HINT})"
    if device.type == "cpu" and not kernel_support.interpreting():
        return f"the kernels run on the CPU only under Triton's interpreter ({kernel_support.INTERPRETER_HINT})"
    return None


def engine_options(label: str, sizes: Sizes) -> dict:
    """The objective's options for the engine ``label`` of the correctness checks, with its block size."""
    options = TILINGS[label]
    if options.get("tiling") == "triton":
        return {**options, "block_size": sizes.kernel_block}
    if options.get("tiling") != "never":
        return {**options, "block_size": sizes.block}
    return dict(options)


# -- the checks ---------------------------------------------------------------------------------------


def check_objectives(context: Context) -> dict:
    """Every objective under every engine at each of :attr:`Sizes.objective_dims` (``name/engine/d``)."""
    sizes, rows = context.sizes, {}
    skipped = {label: why for label in TILINGS if (why := unavailable(label, context.device))}
    for dim in sizes.objective_dims:
        a, b = features(sizes.objective_batch, dim)
        for name in objectives.OBJECTIVES:
            reference = training_call(build(name, sizes.objective_batch, tiling="never").double(), a, b)
            for label in TILINGS:
                if label not in skipped:
                    objective = build(name, sizes.objective_batch, **engine_options(label, sizes)).to(context.device)
                    got = training_call(objective, a.float().to(context.device), b.float().to(context.device))
                    errors = {key: relative_error(got[key], want) for key, want in reference.items()}
                    worst = max(errors.values())
                    rows[f"{name}/{label}/{dim}"] = {
                        "worst_relative_error": worst,
                        "worst_entry": max(errors, key=errors.get),
                        "passed": worst <= REFERENCE_TOLERANCE,
                    }
    return {
        "passed": all(row["passed"] for row in rows.values()) and not (skipped and context.device.type == "cuda"),
        "tolerance": REFERENCE_TOLERANCE,
        "skipped": skipped,
        "runs": rows,
    }


def check_precision(context: Context) -> dict:
    """The bf16 contract on the dense, tiled and fused engines (the fused one where it runs)."""
    rows = {}
    a, b = features(PRECISION_BATCH, PRECISION_DIM)
    a, b = a.bfloat16().double(), b.bfloat16().double()  # the reference sees the same (representable) features
    skipped = {label: why for label in PRECISION_ENGINES if (why := unavailable(label, context.device))}
    for name in objectives.OBJECTIVES:
        reference = training_call(build(name, PRECISION_BATCH, **TILINGS["dense"]).double(), a, b)  # kernels: no fp64
        for label in (label for label in PRECISION_ENGINES if label not in skipped):
            options = {**TILINGS[label], **PRECISION_BLOCKS.get(label, {})}
            objective = build(name, PRECISION_BATCH, **options).to(context.device)
            x, y = (t.bfloat16().to(context.device).requires_grad_() for t in (a, b))
            objective.begin_step()
            value = objective(x, y, index=torch.arange(x.shape[0], device=context.device))
            value.backward()
            value = value.detach()
            state = getattr(objective, "state", None)
            state_types = sorted({str(t.dtype) for t in state.tensors.values()}) if state is not None else []
            loss_error = abs(float(value) - float(reference["value"])) / max(1.0, abs(float(reference["value"])))
            gradient_error = max(
                float((got.double().cpu() - want).norm() / want.norm())
                for got, want in ((x.grad, reference["grad_a"]), (y.grad, reference["grad_b"]))
            )
            types_kept = value.dtype == torch.float32 and x.grad.dtype == torch.bfloat16
            rows[f"{name}/{label}"] = {
                "loss_error": loss_error,
                "gradient_error": gradient_error,
                "state_types": state_types,
                "passed": loss_error <= bfloat16_loss_bound(name)
                and gradient_error <= BFLOAT16_GRADIENT_BOUND
                and types_kept
                and state_types in ([], ["torch.float32"]),
            }
    return {
        "passed": all(row["passed"] for row in rows.values()) and not (skipped and context.device.type == "cuda"),
        "skipped": skipped,
        "runs": rows,
    }


def open_clip_loss():
    sys.path.insert(0, str(Path(__file__).parent))
    from tiled_speed import load_open_clip_loss  # the sibling benchmark's loader (open_clip's loss.py alone)

    return load_open_clip_loss()


@contextmanager
def float32_products(precision: str) -> Iterator[None]:
    """PyTorch's float32 matrix products (and so the kernels') in ``precision``, ``"tf32"`` or ``"ieee"``, inside the
    block, through PyTorch's current API (``fp32_precision``; the older ``allow_tf32`` cannot be read once it was
    set), restored after."""
    matmul = torch.backends.cuda.matmul
    previous = matmul.fp32_precision
    matmul.fp32_precision = precision
    try:
        yield
    finally:
        matmul.fp32_precision = previous


def check_loss_speed(context: Context) -> dict:
    """Timed with float32 products through TF32 tensor cores (what the matmul floor of the launch model assumes;
    the correctness checks keep PyTorch's full-precision default)."""
    with float32_products("tf32"):
        return _loss_speed(context)


def _loss_speed(context: Context) -> dict:
    sizes, device, rows = context.sizes, context.device, []
    clip_loss, reason = open_clip_loss()
    skipped = {label: why for label in SPEED_ENGINES if (why := unavailable(label, device))}
    for dtype_name in sizes.speed_dtypes:
        dtype = getattr(torch, dtype_name)
        for batch in sizes.speed_batches:
            rows += _speed_rows(context, batch, dtype, clip_loss, skipped)
    return {
        "passed": not (skipped and device.type == "cuda"),
        "dim": sizes.speed_dim,
        "dtypes": list(sizes.speed_dtypes),
        "engines": [label for label in SPEED_ENGINES if label not in skipped],
        "skipped": skipped,
        "products": {"bfloat16": "bfloat16", "float32": "tf32" if device.type == "cuda" else "float32"},
        "open_clip": reason or "ClipLoss",
        "rows": rows,
    }


def _speed_rows(context: Context, batch: int, dtype: torch.dtype, clip_loss, skipped: dict) -> list[dict]:
    """One row per method at one batch and feature type: seconds per step, peak memory, and the ratio to the
    floor's time."""
    sizes, device = context.sizes, context.device
    generator = torch.Generator().manual_seed(0)
    a, b = (
        torch.nn.functional.normalize(torch.randn(batch, sizes.speed_dim, generator=generator), dim=1)
        .to(device, dtype)
        .requires_grad_()
        for _ in range(2)
    )
    methods: dict[tuple[str, str], Callable[[], object]] = {
        ("floor", "torch.mm"): lambda: _floor(a.detach(), b.detach())
    }
    for name in SPEED_OBJECTIVES:
        for label in SPEED_ENGINES:
            if label not in skipped:
                objective = build(name, batch, **TILINGS[label]).to(device)
                methods[(name, label)] = lambda o=objective: _loss_step(o, a, b)
    if clip_loss is not None:
        module, scale = clip_loss(), torch.tensor(1 / 0.07, device=device)
        methods[("open_clip", "dense")] = lambda: module(a, b, scale).backward()
    rows = []
    for (objective_name, engine), step in methods.items():
        method = objective_name if objective_name in ("floor", "open_clip") else f"{objective_name}/{engine}"
        row: dict = {"batch": batch, "dtype": str(dtype).removeprefix("torch."), "method": method}
        row.update(objective=objective_name, engine=engine)
        try:
            seconds, peak = timed(step, device, sizes.repeats)
            row.update(seconds=round(seconds, 5), peak_mib=None if peak is None else round(peak / 2**20, 1))
        except (RuntimeError, torch.OutOfMemoryError) as error:
            if not out_of_memory(error):
                raise
            row["error"] = "does not fit"
        finally:
            a.grad = b.grad = None
            if device.type == "cuda":
                torch.cuda.empty_cache()
        rows.append(row)
    floor = rows[0].get("seconds")
    for row in rows:
        if floor and row.get("seconds") is not None:
            row["over_floor"] = round(row["seconds"] / floor, 2)
    return rows


def plot_speed(record: dict, path: Path, device: str) -> Path:
    """Seconds per step (top) and peak memory (bottom) against the batch, one column per feature type."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    dtypes = record["dtypes"]
    methods = list(dict.fromkeys(row["method"] for row in record["rows"]))
    figure, axes = plt.subplots(2, len(dtypes), figsize=(5.5 * len(dtypes), 7.5), squeeze=False)
    for column, dtype in enumerate(dtypes):
        for color, method in enumerate(methods):
            found = [r for r in record["rows"] if r["dtype"] == dtype and r["method"] == method and "seconds" in r]
            if not found:
                continue
            style = {"marker": "o", "label": method, "color": f"C{color}"}
            style["linestyle"] = ":" if method == "floor" else "--" if method.endswith("/fused") else "-"
            batches = [r["batch"] for r in found]
            axes[0, column].plot(batches, [r["seconds"] for r in found], **style)
            if all(r["peak_mib"] is not None for r in found):
                axes[1, column].plot(batches, [max(r["peak_mib"], 1e-3) for r in found], **style)
        products = record["products"][dtype]
        for row, label in ((0, "forward + backward (s)"), (1, "peak memory above the inputs (MiB)")):
            axis = axes[row, column]
            axis.set_xscale("log", base=2)
            axis.set_yscale("log")
            axis.set_xlabel(f"batch B (d = {record['dim']}, {dtype} features, {products} products)")
            axis.set_ylabel(label)
            axis.grid(True, which="both", alpha=0.3)
            if axis.has_data():
                axis.legend(fontsize=8)
            else:
                axis.text(0.5, 0.5, "measured on CUDA only", ha="center", transform=axis.transAxes)
    figure.suptitle(f"loss step on {device}: tiled and fused engines, open_clip, matmul floor (missing: does not fit)")
    figure.tight_layout()
    figure.savefig(path, dpi=110)
    plt.close(figure)
    return path


def _loss_step(objective: objectives.Objective, a: torch.Tensor, b: torch.Tensor) -> None:
    objective.begin_step()
    objective(a, b, index=torch.arange(a.shape[0], device=a.device)).backward()


def _floor(a: torch.Tensor, b: torch.Tensor, strip: int = 16_384) -> None:
    """The three B x B x d products of a step (score matrix, two feature gradients), in row strips."""
    grad_b = torch.zeros_like(b)
    for start in range(0, a.shape[0], strip):
        rows = a[start : start + strip]
        scores = rows @ b.T
        _ = scores @ b
        grad_b += scores.T @ rows


CONFIG_FIELDS = ("block_m", "block_k", "block_d", "warps", "stages")
"""What tells two candidates apart (blocks are square: ``block_n`` is ``block_m``)."""
TUNE_MARGIN = 1.05
"""How much faster than the launched configuration a candidate must be to be proposed for the table (timing noise
of a median over :attr:`Sizes.repeats` calls is a few per cent)."""


def check_kernel_configs(context: Context) -> dict:
    """Fused CLIP (InfoNCE, cross pairing) forward + backward at :attr:`Sizes.config_batch` x
    :attr:`Sizes.config_dim` for candidates of ``kernels/configs.py``, per type of :attr:`Sizes.speed_dtypes`:
    each one's loss and feature gradients against the dense engine in float64 on the same device, and on CUDA its
    time, the fastest, the launched one's ratio to it, and the table entry to write where the fastest wins by
    :data:`TUNE_MARGIN`. float32 products through TF32 on CUDA, as ``loss_speed`` times them."""
    device = context.device
    if why := unavailable("fused", device):
        return {"passed": device.type != "cuda", "skipped": why}
    with float32_products("tf32" if device.type == "cuda" else "ieee"):
        types = {name: _config_runs(context, getattr(torch, name)) for name in context.sizes.speed_dtypes}
    return {
        "passed": all(record["passed"] for record in types.values()),
        "objective": "infonce",
        "batch": context.sizes.config_batch,
        "dim": context.sizes.config_dim,
        "timed": "on the GPU" if device.type == "cuda" else "no: one call each under Triton's interpreter",
        "products": {"bfloat16": "bfloat16", "float32": "tf32" if device.type == "cuda" else "ieee"},
        "types": types,
    }


def candidate_order(launched: kernel_configs.KernelConfig, listed: list) -> list:
    """``launched`` first, then the candidates that differ from it in one of :data:`CONFIG_FIELDS` (what each
    factor alone does), then the others, each group in the list's order."""
    changed = lambda c: sum(getattr(c, f) != getattr(launched, f) for f in CONFIG_FIELDS)  # noqa: E731
    return [launched, *sorted((c for c in listed if c != launched), key=changed)]


def distinct_shapes(launched: kernel_configs.KernelConfig, listed: list) -> list:
    """``launched`` first, then one candidate per other block shape (rows, product step, gradient slice), those
    that change more of the three first: the second changes every one the key allows."""
    shape = lambda c: (c.block_m, c.block_k, c.block_d)  # noqa: E731
    firsts = {shape(launched): launched}
    for config in listed:
        firsts.setdefault(shape(config), config)
    changed = lambda c: -sum(x != y for x, y in zip(shape(c), shape(launched), strict=True))  # noqa: E731
    return [launched, *sorted((c for c in firsts.values() if c is not launched), key=changed)]


def table_entry(table_key: tuple, config: kernel_configs.KernelConfig) -> str:
    """The line to add to ``configs.TUNED`` for ``config``."""
    fields = ", ".join(f"{name}={getattr(config, name)}" for name in asdict(config))
    return f"{table_key!r}: KernelConfig({fields}),"


def _config_runs(context: Context, dtype: torch.dtype) -> dict:
    sizes, device = context.sizes, context.device
    batch, dim = sizes.config_batch, sizes.config_dim
    a, b = (torch.nn.functional.normalize(t, dim=1).to(dtype).double() for t in features(batch, dim))
    reference = build("infonce", batch, tiling="never").double().to(device)
    want = training_call(reference, a.to(device), b.to(device))
    del reference
    listed = kernel_configs.candidates(dim, dtype)
    if device.type == "cuda":
        launched = kernel_configs.choose(device, dim, dtype)
        order = candidate_order(launched, listed)
        table_key = (kernel_configs.architecture(device), *kernel_configs.key(dim, dtype))
    else:  # the interpreter launches one fixed configuration: check candidates of other block shapes instead
        launched, table_key = listed[0], None
        order = distinct_shapes(launched, listed)
    wide = dtype != torch.float32 or device.type == "cuda"  # bf16, or float32 through TF32: the bf16 contract
    bounds = (bfloat16_loss_bound("infonce"), BFLOAT16_GRADIENT_BOUND) if wide else (REFERENCE_TOLERANCE,) * 2
    objective = build("infonce", batch, tiling="triton").to(device)
    x, y = (t.to(device, dtype).requires_grad_() for t in (a, b))
    runs, clock = [], time.perf_counter()
    for config in order[: sizes.config_candidates]:
        if runs and time.perf_counter() - clock > sizes.config_seconds:
            break
        runs.append(_config_run(context, objective, config, x, y, want, bounds))
    timed_runs = [run for run in runs if run.get("agrees") and run.get("seconds")]
    best = min(timed_runs, key=lambda run: run["seconds"], default=None)
    first = runs[0]
    record: dict = {
        "key": list(kernel_configs.key(dim, dtype)),
        "launched": asdict(launched),
        "bounds": {"loss": bounds[0], "gradients": bounds[1]},
        "listed": len(listed),
        "tried": len(runs),
        "untried": len(order) - len(runs),
        "runs": runs,
        "best": best,
        "launched_over_best": round(first["seconds"] / best["seconds"], 3) if best and first.get("seconds") else None,
        "table_entry": None,
    }
    if table_key and best and (record["launched_over_best"] or 0.0) >= TUNE_MARGIN:
        record["table_entry"] = table_entry(table_key, kernel_configs.KernelConfig(**best["config"]))
    unfit = [run for run in runs if run.get("error", "").startswith("OutOfResources")]
    record["passed"] = bool(first.get("agrees")) and all(run.get("agrees") for run in runs if run not in unfit)
    return record


def _config_run(context: Context, objective, config, x: torch.Tensor, y: torch.Tensor, want: dict, bounds) -> dict:
    """One candidate: its errors against ``want`` after one call (compiling it on CUDA), then its time there."""
    device, run = context.device, {"config": asdict(config)}
    clock = time.perf_counter()
    try:
        with kernel_configs.launching(config):
            got = training_call(objective, x, y)
            run["seconds"] = round(time.perf_counter() - clock, 5)  # the interpreter's, replaced on CUDA
            if device.type == "cuda":
                seconds, peak = timed(lambda: _loss_step(objective, x, y), device, context.sizes.repeats)
                run.update(seconds=round(seconds, 5), peak_mib=round(peak / 2**20, 1))
    except Exception as error:  # one that does not compile or fit is recorded; the others still run
        return {**run, "seconds": None, "agrees": False, "error": f"{type(error).__name__}: {str(error)[:300]}"}
    finally:
        x.grad = y.grad = None
        if device.type == "cuda":
            torch.cuda.empty_cache()
    loss_error = abs(float(got["value"] - want["value"])) / max(1.0, abs(float(want["value"])))
    gradient_error = max(float((got[k] - want[k]).norm() / want[k].norm()) for k in ("grad_a", "grad_b"))
    run.update(loss_error=loss_error, gradient_error=gradient_error)
    run["agrees"] = loss_error <= bounds[0] and gradient_error <= bounds[1]
    return run


def check_training_step(context: Context) -> dict:
    from uncurated.train import load_config
    from uncurated.train.builders import build_model

    sizes, device = context.sizes, context.device
    keys = [
        "pipeline=image_text",
        "image_encoder=hf:resnet",
        "text_encoder=hf:distilbert",
        f"image_size={sizes.image_size}",
        "projection_dim=256",
        "projection_layers=1",
        "probe_layer=encoder",
        "max_caption_length=32",
    ] + (TINY_BACKBONES if sizes.tiny_backbones else [])
    captions = [f"a photo of a {w} on a table, number {i}" for i, w in enumerate(["cat", "dog", "cup", "car"] * 8)]

    class Data(torch.utils.data.Dataset):
        def __init__(self):
            self.captions = captions * 50

        def __len__(self):
            return 1

        def __getitem__(self, index):
            return {"image": torch.zeros(3, sizes.image_size, sizes.image_size)}

    torch.manual_seed(0)
    model = build_model(load_config(keys), Data()).to(device).train()
    loss = objectives.build("infonce").to(device)
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    images = torch.rand(sizes.step_batch, 3, sizes.image_size, sizes.image_size, device=device)
    texts = [captions[i % len(captions)] for i in range(sizes.step_batch)]
    values = []

    def step():
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16):
            a, b = model(images, texts)
        value = loss(a.float(), b.float())
        optimizer.zero_grad(set_to_none=True)
        value.backward()
        optimizer.step()
        values.append(float(value.detach()))

    seconds, peak = timed(step, device, sizes.repeats)
    return {
        "passed": all(math.isfinite(v) for v in values),
        "batch": sizes.step_batch,
        "parameters_millions": round(sum(p.numel() for p in model.parameters()) / 1e6, 1),
        "seconds_per_step": round(seconds, 4),
        "samples_per_second": round(sizes.step_batch / seconds, 1),
        "peak_mib": None if peak is None else round(peak / 2**20, 1),
    }


class DeviceAudit(TorchDispatchMode):
    """Counts the operators that compute on host tensors while the work is on an accelerator, and the copies."""

    def __init__(self) -> None:
        super().__init__()
        self.host_operators: dict[str, int] = {}
        self.copies = 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        tensors = [t for t in (*args, *(kwargs or {}).values(), out) if isinstance(t, torch.Tensor)]
        devices = {t.device.type for t in tensors}
        name = func.overloadpacket.__name__
        if len(devices) > 1:
            self.copies += 1
        elif devices == {"cpu"} and any(t.numel() > 1 for t in tensors) and not func.is_view:
            self.host_operators[name] = self.host_operators.get(name, 0) + 1
        return out


def check_device_hygiene(context: Context) -> dict:
    from uncurated.train import random_state
    from uncurated.train.batches import BatchPlan, load_batches
    from uncurated.train.distributed import Distributed

    sizes, device = context.sizes, context.device
    a, b = (t.float().to(device) for t in features(sizes.objective_batch, sizes.objective_dims[0]))
    found: dict = {}
    # 1. nothing computed on the host during a tiled step whose features and state are on the device
    audits = {}
    for name in ("infonce", "nuclr"):
        objective = build(name, sizes.objective_batch, tiling="always", block_size=sizes.block).to(device)
        training_call(objective, a, b)  # the state settles on the device at the first call
        x = a.clone().requires_grad_()
        with DeviceAudit() as audit:
            objective.begin_step()
            objective(x, b, index=torch.arange(a.shape[0], device=device)).backward()
        audits[name] = {"host_operators": sum(audit.host_operators.values()), "copies": audit.copies}
        if device.type != "cpu":  # on the CPU every operator runs on the host, as it should
            audits[name]["host_operator_names"] = sorted(audit.host_operators)
    on_host = device.type != "cpu" and any(record["host_operators"] for record in audits.values())
    found["step_audit"] = {**audits, "passed": not on_host}
    # 2. state kept on the host: the same state as on the device (its copies must not race)
    states = {}
    for where in (None, "cpu"):
        objective = build("nuclr", sizes.objective_batch, state_device=where, tiling="always", block_size=sizes.block)
        for _ in range(2):
            result = training_call(objective.to(device), a, b)
        states[str(where)] = result
    error = max(relative_error(states["cpu"][k], v) for k, v in states["None"].items())
    found["host_state"] = {"relative_error": error, "passed": error <= 1e-6}
    # 3. batches of in-memory data come in pinned memory for a CUDA device
    data = _InMemory(torch.rand(8, 3, 4, 4))
    batch = next(load_batches(data, BatchPlan(8, 4, 0), 0, 0, Distributed(device=device)))
    pinned = batch["image"].is_pinned() if device.type == "cuda" else None
    found["pinned_batches"] = {"pinned": pinned, "passed": pinned in (None, True)}
    # 4. every generator, the CUDA ones included, continues where a checkpoint left it
    saved = random_state.capture()
    first = torch.rand(4, device=device), torch.rand(4)
    random_state.restore(saved)
    second = torch.rand(4, device=device), torch.rand(4)
    cuda_states = len(saved["cuda"])
    same = all(torch.equal(x, y) for x, y in zip(first, second, strict=True))
    found["random_state"] = {"cuda_generators": cuda_states, "passed": same and (device.type != "cuda" or cuda_states)}
    return {"passed": all(record["passed"] for record in found.values()), **found}


class _InMemory(torch.utils.data.Dataset):
    """Data held in memory, read a batch at a time (what ``load_batches`` indexes directly)."""

    def __init__(self, images: torch.Tensor) -> None:
        self.images = images

    def __len__(self) -> int:
        return len(self.images)

    def batch(self, indices: torch.Tensor) -> dict:
        return {"image": self.images[indices], "index": indices}


DISTRIBUTED_CHILD = textwrap.dedent(
    """
    import sys, torch, torch.distributed as dist
    backend, port = sys.argv[1], sys.argv[2]
    device = torch.device("cuda", 0) if backend == "nccl" else torch.device("cpu")
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1)
    local = torch.arange(6.0, device=device).view(3, 2)
    pieces = [torch.empty_like(local)]
    dist.all_gather(pieces, local)
    summed = local.clone()
    dist.all_reduce(summed)
    holder = [{"step": 3}]
    dist.broadcast_object_list(holder, src=0)
    dist.barrier()
    assert torch.equal(pieces[0], local) and torch.equal(summed, local) and holder[0] == {"step": 3}
    from uncurated import objectives
    nuclr = objectives.build("nuclr", num_samples=8).to(device)
    nuclr.set_epoch(0.0)
    nuclr.begin_step()
    nuclr(torch.randn(8, 4, device=device), torch.randn(8, 4, device=device), index=torch.arange(8, device=device))
    dist.destroy_process_group()
    print("ok")
    """
)


def check_distributed(context: Context) -> dict:
    backend = "nccl" if context.device.type == "cuda" else "gloo"
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        port = probe.getsockname()[1]
    command = [sys.executable, "-c", DISTRIBUTED_CHILD, backend, str(port)]
    try:
        done = subprocess.run(command, capture_output=True, text=True, timeout=300)
    except subprocess.TimeoutExpired:
        return {"passed": False, "backend": backend, "error": "timed out after 300 s"}
    return {
        "passed": done.returncode == 0 and "ok" in done.stdout,
        "backend": backend,
        "world_size": 1,
        "stderr_tail": done.stderr[-1500:] if done.returncode else "",
    }


CHECKS: list[Check] = [
    Check("objectives", check_objectives, 150),
    Check("precision", check_precision, 40),
    Check("device_hygiene", check_device_hygiene, 20),
    Check("distributed", check_distributed, 20),
    Check("loss_speed", check_loss_speed, 240),
    Check("kernel_configs", check_kernel_configs, 75),
    Check("training_step", check_training_step, 45),
]
"""Every check ``make gpu-check`` runs, in order (see the module docstring): the correctness checks first, then the
timings, so that a budget too short for all leaves out timings."""
BUDGET_MINUTES = 8.0
"""The default time budget of a run (``--budget-minutes``): a GPU lent for a few minutes at a time."""
WHEELS = {"sklearn": "scikit-learn", "PIL": "pillow", "yaml": "pyyaml", "kornia_rs": "kornia-rs"}
"""The distribution whose wheel brings a module, where its name differs."""


def missing_package(name: str) -> str:
    """What to do where the module ``name`` is not installed in the Python that runs the check."""
    wheel = WHEELS.get(name, name)
    return (
        f"needs {name!r}, which this Python cannot import: bring its wheel (`pip download {wheel} --no-deps -d wheels`"
        f" where there is network), then `{sys.executable} -m pip install --no-deps wheels/*.whl` here"
    )


def run_checks(
    context: Context,
    names: list[str] | None = None,
    budget_seconds: float = math.inf,
    done: Callable[[dict], None] | None = None,
) -> dict:
    """Run the checks (all, or those ``names``), each caught on its own: one failing does not stop the others. A
    check that would not fit what is left of ``budget_seconds`` is recorded as skipped, not started; ``done`` gets
    the report after each check."""
    report: dict = {}
    started = time.perf_counter()
    for check in CHECKS:
        if names and check.name not in names:
            continue
        left = budget_seconds - (time.perf_counter() - started)
        needed = check.estimate_seconds if context.estimated else 0.0
        if needed >= left or left <= 0:
            report[check.name] = {
                "passed": None,
                "skipped": f"over the budget: {needed:g} s estimated, {max(left, 0.0):.0f} s left",
            }
        else:
            report[check.name] = _run_check(check, context)
        print(f"{check.name:>15}: {verdict(report[check.name])}", flush=True)
        if done is not None:
            done(report)
    return report


def _run_check(check: Check, context: Context) -> dict:
    clock = time.perf_counter()
    try:
        record = check.run(context)
    except ModuleNotFoundError as error:  # a package the image lacks: named with the wheel to bring
        record = {"passed": False, "missing": error.name, "error": missing_package(error.name or str(error))}
    except Exception as error:  # recorded with its traceback; the other checks still run
        record = {"passed": False, "error": f"{type(error).__name__}: {error}", "traceback": traceback.format_exc()}
    record["seconds"] = round(time.perf_counter() - clock, 1)
    return record


def verdict(record: dict) -> str:
    if record["passed"] is None:
        return f"skipped ({record['skipped']})"
    return f"{'passed' if record['passed'] else 'FAILED'} ({record['seconds']} s)"


def device_name(device: torch.device) -> str:
    if device.type == "cuda":
        return torch.cuda.get_device_name(device)
    return platform.processor() or platform.machine() or "cpu"


def no_cuda_message() -> str:
    build = f"CUDA {torch.version.cuda}" if torch.version.cuda else "a CPU build"
    return (
        f"gpu_check: no CUDA device here (torch {torch.__version__}, {build}; torch.cuda.is_available() is False). "
        "Run it where a GPU is, with a CUDA build of torch (the system's python3: `make gpu-check PY=python3`). "
        "--cpu-smoke runs the tiny sizes on the CPU instead, which checks the script, not a GPU."
    )


def parse_arguments(argv: list[str] | None) -> argparse.Namespace:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--only", nargs="+", choices=[check.name for check in CHECKS], help="run these checks only")
    parser.add_argument("--tiny", action="store_true", help="the tiny sizes on the CUDA device")
    parser.add_argument(
        "--cpu-smoke",
        action="store_true",
        help="the tiny sizes on the CPU, the fused kernels under Triton's interpreter (what the tests run); without "
        "it, a machine without CUDA is refused",
    )
    parser.add_argument("--device", default="cuda", help="the CUDA device: cuda, cuda:1, ... (default: cuda)")
    parser.add_argument(
        "--budget-minutes",
        type=float,
        default=BUDGET_MINUTES,
        help=f"start a check only where its estimated time fits what is left (default: {BUDGET_MINUTES:g}); the "
        "others are listed as skipped",
    )
    parser.add_argument(
        "--config-seconds",
        type=float,
        help="kernel_configs: time every candidate started within this many seconds per type (default: at most "
        f"{FULL.config_candidates} candidates started within {FULL.config_seconds:g} s on CUDA)",
    )
    parser.add_argument(
        "--output", type=Path, help="the JSON to write, the PNG beside it (default: benchmarks/results/gpu_check*.json)"
    )
    args = parser.parse_args(argv)
    if args.budget_minutes < 0:
        parser.error(f"--budget-minutes must be at least 0, got {args.budget_minutes:g}")
    return args


def main(argv: list[str] | None = None) -> int:
    args = parse_arguments(argv)
    if args.cpu_smoke:
        device, sizes = torch.device("cpu"), TINY
    else:
        device = torch.device(args.device)
        if device.type != "cuda" or not torch.cuda.is_available():
            print(no_cuda_message(), file=sys.stderr)
            return 2
        sizes = TINY if args.tiny else FULL
    if args.config_seconds is not None:
        sizes = replace(sizes, config_candidates=10_000, config_seconds=args.config_seconds)
    output = args.output or RESULTS / ("gpu_check.json" if device.type == "cuda" else "gpu_check_cpu.json")
    output.parent.mkdir(parents=True, exist_ok=True)
    started = time.time()
    planned = [check.name for check in CHECKS if not args.only or check.name in args.only]

    def write(report: dict) -> dict:
        summary = {
            "benchmark": "gpu_check",
            "device": device_name(device),
            "device_type": device.type,
            "torch": torch.__version__,
            "cuda": torch.version.cuda,
            "sizes": asdict(sizes),
            "tilings": TILINGS,
            "load_average_start": os.getloadavg()[0],
            "budget_minutes": args.budget_minutes,
            "seconds": round(time.time() - started, 1),
            "passed": all(record["passed"] is not False for record in report.values()),
            "skipped": [name for name, record in report.items() if record["passed"] is None],
            "pending": [name for name in planned if name not in report],
            "checks": report,
        }
        speed = report.get("loss_speed", {})
        if speed.get("rows") and "plot" not in speed:
            speed["plot"] = plot_speed(speed, output.with_suffix(".png"), summary["device"]).name
        output.write_text(json.dumps(summary, indent=2, default=str) + "\n")
        return summary

    write({})
    context = Context(device, sizes, estimated=device.type == "cuda" and not args.tiny)
    summary = write(run_checks(context, args.only, args.budget_minutes * 60, write))
    skipped = f", {len(summary['skipped'])} skipped over the budget" if summary["skipped"] else ""
    print(f"wrote {output}: {'every check run passed' if summary['passed'] else 'some checks FAILED'}{skipped}")
    return 0 if summary["passed"] else 1


if __name__ == "__main__":
    sys.exit(main())
