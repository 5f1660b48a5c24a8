"""The fused Triton kernels (``tiling="triton"``), measured without a GPU (on one, ``make gpu-check`` times them).

* **Counts** (the default): a training step (forward and backward, the second on its objective) of every
  objective, both pairings, at B = 300 and 1,200 (d = 96), under Triton's interpreter: the PyTorch operators
  dispatched, by the layer that dispatched them, the kernel launches, the largest tensor made (against B x B), and
  what the launches alone would cost on an H100 at 5 microseconds each. Writes ``results/triton_launches.json``.
* **--compile**: every kernel variant those passes launch, compiled for sm_90 (H100) by triton's own compiler and
  ptxas (no GPU needed) at the GPU block shapes, for float32 and bfloat16 features of dimension 96 and 1,024, with
  the divisibility hints a launch adds (16-byte aligned pointers, sizes and strides that are multiples of 16):
  registers, spilled bytes and shared memory per program. Writes the installed triton's section of
  ``results/triton_compile.json`` (run it under each triton: ``make test-oldest``'s environment holds the oldest).
* **--errors**: every objective on the kernels against the dense engine, float32, B = 300, d = 96, two steps: the
  largest relative error of the value, the gradients and the state. Writes ``results/triton_errors.json``.
* **--work**: the ``B^2 d`` multiply-adds of a training step of every objective, both pairings, for d = 128, 512
  and 1,024, counted from the launches' grids, switches and sizes at an H100's block shapes (the kernels run under
  the interpreter at B = 40). Writes ``results/triton_work.json``.

    python benchmarks/triton_kernels.py              # counts (about 2 minutes on 2 cores)
    python benchmarks/triton_kernels.py --compile    # counts' variants compiled for an H100 (about 10 minutes)
    python benchmarks/triton_kernels.py --errors     # agreement with the dense engine (a few minutes)
    python benchmarks/triton_kernels.py --work       # counted work per step (a few minutes)
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import re
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import torch

if not torch.cuda.is_available():  # before triton is imported: the kernels then run under its interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")

from threadpoolctl import threadpool_limits  # noqa: E402
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_flatten  # noqa: E402

from uncurated import objectives  # noqa: E402
from uncurated.objectives.tiled.kernels import recorded_launches  # noqa: E402

RESULTS = Path(__file__).parent / "results"
NAMES = ("infonce", "siglip", "cyclip", "dcl", "hcl", "rince", "clip_reg", "sogclr", "isogclr", "nuclr")
STATEFUL = ("sogclr", "isogclr", "nuclr")
PAIRINGS = ("cross", "two_view")
LAUNCH_SECONDS = 5e-6
"""What one operator or kernel launch costs on an H100 (the model of the tile-policy benchmark)."""
BUDGET = {False: 96, True: 208}
"""The operators and launches one step may take: a batch objective, a global one."""
LAYERS = (
    ("objectives/tiled/", "statistics (engine and kernels)"),
    ("precision.py", "statistics (engine and kernels)"),
    ("objectives/engine.py", "pairing (batch layout)"),
    ("state/", "per-sample state"),
    ("objectives/stateful.py", "per-sample state"),
    ("validation.py", "input checks"),
    ("objectives/base.py", "normalization and averaging"),
    ("objectives/temperature.py", "temperature"),
    ("objectives/", "row loss"),
)


class OperatorCount(TorchDispatchMode):
    """The PyTorch operators dispatched, by the layer of ``uncurated`` that dispatched them, and the largest tensor.

    An operator is attributed to the innermost ``uncurated`` frame on the stack; the backward formulas of PyTorch's
    own operators (the row loss's, the normalization's) run from the autograd engine and have none.
    """

    def __init__(self) -> None:
        super().__init__()
        self.layers: dict[str, int] = {}
        self.largest = 0

    @property
    def operators(self) -> int:
        return sum(self.layers.values())

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        layer = _layer(sys._getframe(1))
        self.layers[layer] = self.layers.get(layer, 0) + 1
        out = func(*args, **(kwargs or {}))
        sizes = [t.numel() for t in tree_flatten(out)[0] if isinstance(t, torch.Tensor)]
        self.largest = max([self.largest, *sizes])
        return out


def _layer(frame) -> str:
    marker = f"{os.sep}uncurated{os.sep}"
    while frame is not None and marker not in frame.f_code.co_filename:
        frame = frame.f_back
    if frame is None:
        return "autograd of PyTorch operators"
    path = frame.f_code.co_filename.split(marker, 1)[1].replace(os.sep, "/")
    return next((name for prefix, name in LAYERS if path.startswith(prefix)), path)


def build(name: str, pairing: str, block: int, tiling: str = "triton", num_samples: int = 4096):
    """``name`` on the kernels (or the engine ``tiling`` names), past NUCLR's frozen epochs."""
    params = {"num_samples": num_samples} if name in STATEFUL else {}
    block_size = block if tiling == "triton" else None
    objective = objectives.build(name, tiling=tiling, block_size=block_size, pairing=pairing, **params)
    if name in STATEFUL:
        objective.set_epoch(10)  # past NUCLR's frozen epochs: every update runs
    return objective


def features(batch: int, dim: int, dtype=torch.float32, device="cpu", seed: int = 0):
    generator = torch.Generator(device=device).manual_seed(seed)
    return [torch.randn(batch, dim, generator=generator, device=device, dtype=dtype).requires_grad_() for _ in "ab"]


def step(objective, a, b, index=None) -> torch.Tensor:
    """One training call, forward and backward; its value."""
    call = {"index": index} if isinstance(objective, objectives.StatefulObjective) else {}
    if call:
        objective.begin_step()
    value = objective(a, b, **call)
    value.backward()
    return value.detach()


def count(name: str, pairing: str, batch: int, dim: int, block: int, tiling: str = "triton") -> dict:
    """Operators, launches and the largest tensor of a training step: the second on one objective, so that what
    the first does once (creating the per-sample state, recording what the row loss asks) is not counted."""
    objective = build(name, pairing, block, tiling, num_samples=max(4096, batch))
    a, b = features(batch, dim)
    step(objective, a, b, torch.arange(batch))
    a.grad = b.grad = None
    with recorded_launches() as launches, OperatorCount() as counted:
        step(objective, a, b, torch.arange(batch))
    total = counted.operators + len(launches)
    return {
        "operators": counted.operators,
        "launches": len(launches),
        "total": total,
        "budget": BUDGET[name in STATEFUL],
        "by_layer": dict(sorted(counted.layers.items(), key=lambda item: -item[1])),
        "largest_tensor": counted.largest,
        "batch_squared": batch * batch,
        "predicted_h100_launch_ms": round(total * LAUNCH_SECONDS * 1e3, 3),
        "kernels": [launch.kernel for launch in launches],
    }


def counts(batches: list[int], dim: int, block: int) -> list[dict]:
    rows = []
    for name in NAMES:
        for pairing in ("cross", "two_view"):
            for batch in batches:
                start = time.perf_counter()
                row = {"objective": name, "pairing": pairing, "batch": batch, **count(name, pairing, batch, dim, block)}
                rows.append(row)
                print(
                    f"{name:9s} {pairing:9s} B={batch:5d}: {row['operators']:4d} operators + {row['launches']} "
                    f"launches (budget {row['budget']}), largest tensor {row['largest_tensor']} "
                    f"[{time.perf_counter() - start:.0f} s]",
                    flush=True,
                )
    return rows


def python_engine(batches: list[int], dim: int) -> list[dict]:
    """The same count for the Python engine (``tiling="always"``, its automatic tiles), CLIP and NUCLR: the
    operators it dispatches grow with the number of tiles."""
    rows = []
    for name in ("infonce", "nuclr"):
        for batch in batches:
            row = {
                "objective": name,
                "pairing": "cross",
                "batch": batch,
                **count(name, "cross", batch, dim, 0, "always"),
            }
            rows.append(row)
            print(f"{name:9s} python engine B={batch:6d}: {row['operators']:6d} operators", flush=True)
    return rows


# -- compiled for a GPU ---------------------------------------------------------------------------------


def variants(dim: int, block: int, batch: int = 64) -> list[dict]:
    """Every distinct kernel variant (kernel and switches, block shapes aside) the objectives' steps launch, with the
    runtime arguments a GPU launch marks divisible by 16 (``divisible``): at a batch that is a multiple of 16, like a
    GPU's, every size and stride is one, and every pointer is 16-byte aligned."""
    found = {}
    for name in NAMES:
        for pairing in ("cross", "two_view"):
            with recorded_launches() as launches:
                step(build(name, pairing, block), *features(batch, dim), torch.arange(batch))
            for launch in launches:
                switches = {k: v for k, v in launch.switches.items() if k not in _SHAPE_SWITCHES}
                signature = tuple(sorted(launch.signature.items()))
                key = (launch.kernel, tuple(sorted(switches.items())), signature, tuple(sorted(launch.divisible)))
                variant = {"kernel": launch.kernel, "switches": switches, "signature": launch.signature}
                found.setdefault(key, {**variant, "divisible": sorted(launch.divisible)})
                found[key].setdefault("objectives", set()).add(f"{name}/{pairing}")
    return [{**v, "objectives": sorted(v["objectives"])} for v in found.values()]


_SHAPE_SWITCHES = tuple(
    f"shape.{name}" for name in ("BLOCK_M", "BLOCK_N", "BLOCK_K", "DIM", "INPUT_PRECISION", "WIDEN")
) + ("BLOCK_D",)
_TYPE_CODES = {torch.float32: "fp32", torch.bfloat16: "bf16", torch.float16: "fp16"}


def compile_variants(path: Path, dims: list[int], dtypes: list[str]) -> list[dict]:
    """Compile the variants listed in ``path`` for sm_90 (run without the interpreter), with the divisibility hints a
    launch adds for the arguments each lists as ``divisible`` (:func:`alignment_hints`): ptxas's resource report."""
    import triton
    from triton.backends.compiler import GPUTarget
    from triton.backends.nvidia.compiler import get_ptxas
    from triton.compiler import ASTSource

    from uncurated.objectives.tiled.kernels import backward, forward
    from uncurated.objectives.tiled.kernels.support import Blocks

    kernels = {"statistics_kernel": forward.statistics_kernel, "gradient_kernel": backward.gradient_kernel}
    ptxas = get_ptxas(90).path
    rows = []
    for variant in json.loads(path.read_text()):
        for dtype_name in dtypes:
            dtype = getattr(torch, dtype_name)
            for dim in dims:
                blocks = Blocks.choose(None, dim, dtype, interpreter=False)
                shape = {"BLOCK_M": blocks.rows, "BLOCK_N": blocks.rows, "BLOCK_K": blocks.depth, "DIM": blocks.dim}
                shape.update(INPUT_PRECISION="ieee", WIDEN=False)  # PyTorch's default: no TF32
                constants = {**variant["switches"], **{f"shape.{k}": v for k, v in shape.items()}}
                if variant["kernel"] == "gradient_kernel":
                    constants["BLOCK_D"] = shape["BLOCK_D"] = blocks.gradient_depth
                flat = dict(variant["signature"])
                flat.update({k: "*" + _TYPE_CODES[dtype] for k in ("sides.x", "sides.y", "sides.grad") if k in flat})
                if "sides.grad" in flat and blocks.dim > blocks.gradient_depth:  # sliced: float32 sums
                    flat["sides.grad"] = "*fp32"
                kernel = kernels[variant["kernel"]]
                signature, constexprs = nested_signature(kernel, flat, constants)
                attrs = alignment_hints(kernel, signature, variant.get("divisible", ()))
                start = time.perf_counter()
                compiled = triton.compile(
                    ASTSource(fn=kernel, signature=signature, constexprs=constexprs, attrs=attrs),
                    target=GPUTarget("cuda", 90, 32),
                    options={"num_warps": blocks.warps},
                )
                with tempfile.NamedTemporaryFile("w", suffix=".ptx") as ptx:
                    ptx.write(compiled.asm["ptx"])
                    ptx.flush()
                    report = subprocess.run(
                        [ptxas, "-v", "--gpu-name", "sm_90a", ptx.name, "-o", os.devnull],
                        capture_output=True,
                        text=True,
                        check=True,
                    ).stderr
                row = {
                    "kernel": variant["kernel"],
                    "objectives": variant["objectives"],
                    "switches": {k: v for k, v in variant["switches"].items() if v not in (None, False, -1, 0)},
                    "dtype": dtype_name,
                    "dim": dim,
                    "aligned": len(attrs),
                    "blocks": {**shape, "num_warps": blocks.warps},
                    "shared_memory_bytes": compiled.metadata.shared,
                    **_ptxas_resources(report),
                    **global_accesses(compiled.asm["ptx"]),
                    "compile_seconds": round(time.perf_counter() - start, 1),
                }
                rows.append(row)
                print(
                    f"{row['kernel']:17s} {dtype_name:8s} d={dim:4d} {row['registers']} registers, "
                    f"{row['spill_stores']} B spilled, {row['shared_memory_bytes']} B shared, "
                    f"{row['accesses_16B']} 16-byte accesses, {row['async_copies']} async copies "
                    f"({', '.join(variant['objectives'][:3])}...)",
                    flush=True,
                )
    return rows


def nested_signature(kernel, flat: dict[str, str], constants: dict[str, object]) -> tuple[dict, dict]:
    """ASTSource's signature and constants for ``kernel`` from a launch record's flattened ``group.field`` names: a
    group of switches one constant (its named tuple), any other group the named tuple of its fields' types, as
    :func:`~uncurated.objectives.tiled.kernels.arguments.compact` passed it (``"constexpr"`` for a field left
    out)."""
    from uncurated.objectives.tiled.kernels import arguments

    groups = [c for c in vars(arguments).values() if isinstance(c, type) and issubclass(c, tuple) and c is not tuple]
    signature: dict[str, object] = {}
    constexprs: dict[tuple[int, ...], object] = {}
    for index, param in enumerate(kernel.params):
        name = param.name
        fields = {key.split(".", 1)[1] for key in [*flat, *constants] if key.startswith(name + ".")}
        if param.is_constexpr:  # a switch, or a group of switches passed whole
            group = next((g for g in groups if set(g._fields) == fields), None) if fields else None
            value = group(*(constants[f"{name}.{f}"] for f in group._fields)) if group else constants[name]
            signature[name], constexprs[(index,)] = "constexpr", value
        elif not fields:
            signature[name] = flat[name]
        else:  # the smallest group holding the fields, compacted to them
            group = min((g for g in groups if fields <= set(g._fields)), key=lambda g: len(g._fields))
            kept = tuple(f for f in group._fields if f in fields)
            compacted = arguments.compact_type(group.__name__, kept)
            signature[name] = compacted(*(flat[f"{name}.{f}"] for f in kept))  # named: read by field name
    return signature, constexprs


def alignment_hints(kernel, signature: dict, divisible) -> dict[tuple[int, ...], list]:
    """ASTSource's ``attrs`` as Triton's launcher builds them (the same in triton 3.6 and 3.9): ``tt.divisibility =
    16`` on each runtime argument named in ``divisible`` (flattened ``group.field`` names), keyed by its path, the
    parameter's index and, within a named tuple, the field's."""
    from triton.backends.nvidia.compiler import CUDABackend

    hints: dict[tuple[int, ...], list] = {}
    for name in divisible:
        group, _, field = name.partition(".")
        index = kernel.arg_names.index(group)
        path = (index, signature[group]._fields.index(field)) if field else (index,)
        hints[path] = CUDABackend.parse_attr("D")
    return hints


_ACCESS_16B = re.compile(r"\b(?:ld\.global|st\.global)\S*\.(?:v4\.b32|v2\.b64)\b|\bcp\.async\.cg\.shared\.global\b")
_ASYNC_COPY = re.compile(r"\bcp\.async\.c[ag]\.shared\.global\b")


def global_accesses(ptx: str) -> dict:
    """What the alignment hints change in the PTX: the global memory instructions that move 16 bytes at once (vector
    loads and stores, 16-byte asynchronous copies) and the asynchronous copies into shared memory by which the
    compiler pipelines a loop's loads (``cp.async``)."""
    return {"accesses_16B": len(_ACCESS_16B.findall(ptx)), "async_copies": len(_ASYNC_COPY.findall(ptx))}


def _ptxas_resources(report: str) -> dict:
    registers = spill_stores = spill_loads = None
    for line in report.splitlines():
        if "Used" in line and "registers" in line:
            registers = int(line.split("Used ")[1].split(" registers")[0])
        if "spill stores" in line:
            parts = line.replace(",", "").split()
            spill_stores = int(parts[parts.index("spill") - 2])
            spill_loads = int(parts[parts.index("loads") - 3])
    return {"registers": registers, "spill_stores": spill_stores, "spill_loads": spill_loads}


# -- counted work ---------------------------------------------------------------------------------------------


def work(name: str, pairing: str, dim: int, batch: int = 40) -> dict:
    """The ``B^2 d`` multiply-adds of one training step of ``name`` on an H100's block shapes, counted from the
    launches' grids, switches and sizes. Every program of a launch loops over the ``C`` columns in blocks; per
    block it forms its score products over the ``d`` features (a second one where a backward launch's two slots see
    the block in both orientations) and, with ``FEATURE_GRAD``, the ``dG Y`` product of each ``BLOCK_D``-column
    slice in its loop over the padded dimension. Programs along a grid axis after the first (row blocks) would each
    run those loops again. Padding to whole blocks is left out (``B`` a multiple of the block)."""
    from uncurated.objectives.tiled.kernels import configs, function

    captured = []
    original_launch = function.launch

    def capture(kernel, grid, arguments, warps, stages=None):
        captured.append((kernel.fn.__name__, tuple(grid), arguments))
        original_launch(kernel, grid, arguments, warps, stages)

    objective = build(name, pairing, 64)
    a, b = features(batch, dim)
    step(objective, a, b, torch.arange(batch))
    function.launch = capture
    try:
        with configs.launching(configs.candidates(dim, torch.float32)[0]):  # an H100's untuned shapes
            step(objective, a, b, torch.arange(batch))
    finally:
        function.launch = original_launch
    total, per_launch = 0, []
    for kernel, grid, arguments in captured:
        sides, shape = arguments["sides"], arguments["shape"]
        per_row_block = 1  # programs per row block (grid axes after the first), each running the loops below
        for programs in grid[1:]:
            per_row_block *= programs
        scores, feature_products = 1, 0
        if kernel == "gradient_kernel":
            two = arguments["SLOTS"] == 2
            scores += two and arguments["A"].TRANSPOSED != arguments["B"].TRANSPOSED
            if arguments["FEATURE_GRAD"]:  # the loop over the padded dimension's slices (one where it fits)
                width = arguments["BLOCK_D"]
                feature_products = sum(max(0, min(width, sides.dim - start)) for start in range(0, shape.DIM, width))
        products = per_row_block * (scores * sides.dim + feature_products)
        count = sides.n_rows * sides.n_cols * products
        per_launch.append(round(count / (batch * batch * dim), 3))
        total += count
    return {"per_launch": per_launch, "total": round(total / (batch * batch * dim), 3)}


def work_table(dims: list[int]) -> list[dict]:
    rows = []
    for name in NAMES:
        for pairing in PAIRINGS:
            row = {"objective": name, "pairing": pairing}
            for dim in dims:
                counted = work(name, pairing, dim)
                row[f"d={dim}"] = counted["total"]
                row[f"per_launch d={dim}"] = counted["per_launch"]
            rows.append(row)
            print(f"{name:9s} {pairing:9s} " + "  ".join(f"d={d}: {row[f'd={d}']:g}" for d in dims), flush=True)
    return rows


def agreement(name: str, pairing: str, batch: int, dim: int, device: str, steps: int = 2, block: int = 64) -> dict:
    """The kernels against the dense engine, both float32: the largest error of each quantity relative to its largest
    entry, over ``steps`` steps (the global objectives' second step reads the state the first wrote): the value, the
    features' gradients, the learned parameters' gradients (CLIP's and SigLIP's temperature, SigLIP's bias) and every
    state field after the step."""
    learned = {"learnable": True} if name in ("infonce", "siglip") else {}
    pair = []
    for tiling in ("never", "triton"):
        params = {"num_samples": 2 * batch} if name in STATEFUL else learned
        objective = objectives.build(
            name, tiling=tiling, block_size=block if tiling == "triton" else None, pairing=pairing, **params
        ).to(device)
        if name in STATEFUL:
            objective.set_epoch(10)
        pair.append(objective)
    errors: dict[str, float] = {}
    generator = torch.Generator(device=device).manual_seed(1)
    for seed in range(steps):
        a, b = features(batch, dim, device=device, seed=seed)
        index = torch.randperm(2 * batch, generator=generator, device=device)[:batch]
        found = []
        for objective in pair:
            value = step(objective, a, b, index)
            quantities = {"value": [value], "features": [a.grad, b.grad]}
            quantities["parameters"] = [p.grad for p in objective.parameters()]
            if name in STATEFUL:
                state = objective.state
                quantities["state"] = [state.gather(*key, torch.arange(state.sizes[key[1]])) for key in state.tensors]
            found.append(quantities)
            a.grad = b.grad = None
        for key, wanted in found[0].items():
            for want, have in zip(wanted, found[1][key], strict=True):
                errors[key] = max(errors.get(key, 0.0), _relative_error(want, have))
    return {"objective": name, "pairing": pairing, "batch": batch, "dim": dim, "steps": steps, **errors}


def _relative_error(want: torch.Tensor, have: torch.Tensor) -> float:
    """``max |have - want| / max |want|`` over the finite entries (which must be the same in both)."""
    finite = torch.isfinite(want)
    if not torch.equal(finite, torch.isfinite(have)):
        return float("inf")
    if not finite.any():
        return 0.0
    scale = max(float(want[finite].abs().max()), 1e-30)
    return float((have[finite] - want[finite]).abs().max()) / scale


def _run_record() -> dict:
    import triton

    return {
        "torch": torch.__version__,
        "triton": triton.__version__,
        "interpreter": os.environ.get("TRITON_INTERPRET") == "1",
        "machine": platform.processor() or platform.machine(),
        "load_average": os.getloadavg(),
    }


def _write(name: str, settings: dict, results) -> None:
    _save(RESULTS / name, {"benchmark": "triton_kernels", **_run_record(), **settings, "results": results})


def _write_by_triton(name: str, settings: dict, results) -> None:
    """``results`` in the section of this triton version (``by_triton``), beside the other versions' sections that the
    file holds from runs with the same ``settings`` (a change of settings starts the file anew)."""
    path = RESULTS / name
    previous = json.loads(path.read_text()) if path.exists() else {}
    same = all(previous.get(key) == value for key, value in settings.items())
    runs = previous.get("by_triton", {}) if same else {}
    record = _run_record()
    runs[record["triton"]] = {**record, "results": results}
    newest_first = sorted(runs.items(), key=lambda item: [int(part) for part in re.findall(r"\d+", item[0])])[::-1]
    _save(path, {"benchmark": "triton_kernels", **settings, "by_triton": dict(newest_first)})


def _save(path: Path, report: dict) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--batches", type=int, nargs="+", default=[300, 1200])
    parser.add_argument("--dim", type=int, default=96)
    parser.add_argument("--block", type=int, default=256, help="the kernels' block (counts do not depend on it)")
    parser.add_argument("--compile", action="store_true", help="also compile every variant for an H100")
    parser.add_argument("--compile-variants", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("--errors", action="store_true", help="the kernels against the dense engine, B = 300, d = 96")
    parser.add_argument("--work", action="store_true", help="count the B^2 d multiply-adds per step, d = 128 to 1,024")
    args = parser.parse_args()
    compile_settings = {
        "target": "sm_90 (H100)",
        "dims": [96, 1024],
        "dtypes": ["float32", "bfloat16"],
        "alignment": "a launch's: tt.divisibility 16 on 16-byte aligned pointers and multiples of 16",
    }
    if args.compile_variants is not None:  # the subprocess of --compile, without the interpreter
        rows = compile_variants(args.compile_variants, compile_settings["dims"], compile_settings["dtypes"])
        _write_by_triton("triton_compile.json", compile_settings, rows)
        return
    with threadpool_limits(1, user_api="blas"):  # the interpreter's NumPy products on small blocks
        if args.work:
            dims = [128, 512, 1024]
            _write("triton_work.json", {"dims": dims, "unit": "B^2 d multiply-adds per step"}, work_table(dims))
            return
        if args.errors:
            rows = [agreement(name, pairing, 300, 96, "cpu", block=128) for name in NAMES for pairing in PAIRINGS]
            _write("triton_errors.json", {"batch": 300, "dim": 96, "block": 128, "dtype": "float32"}, rows)
            return
        if args.compile:
            with tempfile.TemporaryDirectory() as folder:
                listed = Path(folder) / "variants.json"
                listed.write_text(json.dumps(variants(args.dim, args.block)))
                environment = {**os.environ, "TRITON_INTERPRET": "0"}  # compiled, not interpreted
                command = [sys.executable, __file__, "--compile-variants", str(listed)]
                subprocess.run(command, env=environment, check=True)
            return
        settings = {"dim": args.dim, "block": args.block, "launch_seconds": LAUNCH_SECONDS}
        results = {"kernels": counts(args.batches, args.dim, args.block)}
        results["python_engine"] = python_engine([args.batches[-1], 16384], args.dim)
        _write("triton_launches.json", settings, results)


if __name__ == "__main__":
    main()
