"""Operators dispatched per training step of every objective, and the time they predict on an H100.

On a GPU every dispatched operator that computes something is (at least) one kernel launch, and a launch
costs a few microseconds of CPU time however small the kernel. This script counts them, with a
``TorchDispatchMode``, for one training step of each objective: L2 normalization, the objective's forward
pass and its backward pass into the two (B, d) feature leaves (the encoders are not included), at
B = 16,384 and 65,536, d = 256, float32, under the CPU tile policy and the CUDA one
(``tile_policy="cuda"``, which on a machine without CUDA takes the budget stated in
``uncurated.objectives.tiled.policy.ASSUMED_CUDA_BUDGET``).

**Counting without the arithmetic.** At B = 65,536 a step forms 4.3e9 scores per direction (1.7e10 for the
two-view objectives' 2B x 2B matrix), and the CUDA policy's tiles are GiB-sized: computing them on 2 CPU
cores would take hours and more memory than the machine has. The counter runs every operator whose output
is a piece of the score matrix on PyTorch's ``meta`` device instead (shapes, types and strides, no data),
and everything else (the features, O(B) statistics, the state, every value the engine branches on) for
real. A tensor is a piece of the score matrix when it has two dimensions larger than the feature dimension
d, or one dimension longer than every per-sample vector (a flattened tile). An operator that reads such a
tensor but makes a small result (a row sum of a tile, a tile times the features) returns ones of the right
shape on the real device, so the values downstream are finite nonsense and the operators dispatched are the
same: the engine's control flow depends on the features (their norms bound the fast path), the positives'
and excluded entries' positions and the batch's shape, never on a score's value. The step is counted at
d = 8 (``COUNT_DIM``) with the dense path or the tiles the policy chooses at d = 256, since the operators
dispatched do not depend on d while the cost of counting does. ``tests/test_launch_count.py`` checks that
this shape-only count at d = 8 equals the real computation's count at d = 32, operator by operator, for
every objective, dense and tiled, on both policies.

**What is counted.** ``launches``: dispatched operators less views (``is_view`` in their schema,
``detach``, ``_unsafe_view``) and allocations that launch nothing (``empty``, ``empty_strided``,
``new_empty``, ``empty_like``, ``lift_fresh``); ``syncs``: ``_local_scalar_dense`` (``.item()``,
``bool(t)``, ``float(t)``), each a device-to-host copy that waits for the GPU. On one device no copy between
host and device is dispatched, so a run whose state lives on the host (``state_device="cpu"``) launches a
few more (two per state field and side).

**The prediction** (an H100 model, not a measurement): ``launch_ms = 5 us x launches`` (the CPU time eager
PyTorch takes to launch a kernel on an H100, a common figure, not measured here) plus the matmul floor
``3 x 2 R C d / peak`` (the score matrix and the two feature-gradient products of an R x C matrix, R = C = B
across modalities and 2B for two views; the tiled engine recomputes the score product in its backward pass, a
fourth product the floor leaves out), with the peak of the products' type from the H100 SXM's published dense
figures (:data:`MATMUL_PEAKS`): float32 on the CUDA cores (IEEE, PyTorch's default), float32 through TF32 tensor
cores, bfloat16. The counted step has float32 features; its ``bfloat16`` entries put the same launches against
bfloat16's floor (a bfloat16 step was not counted). Both terms are summed (no overlap of launches with kernels
assumed, the pessimistic reading). A third term
that model leaves out is reported beside it: ``traffic_ms``, the bytes the launching operators on pieces of the
score matrix read and write (every such input and output counted once per operator, no cache reuse; views
move nothing) at 3.35 TB/s (H100 SXM HBM3). Unfused elementwise passes over tiles are bound by memory
bandwidth, not launches.

Writes ``benchmarks/results/launch_count.json``. 25 minutes on 2 cores under load average 20 (the CPU
policy's 16,384 tiles of a two-view step at 65,536 are each dispatched through Python).

    python benchmarks/launch_count.py                  # every objective, both batches, both policies
    python benchmarks/launch_count.py --batches 4096 --objectives infonce nuclr   # a subset
"""

from __future__ import annotations

import argparse
import math
import os
import time
from collections import Counter
from pathlib import Path

import torch
from timing import write_report  # the sibling module benchmarks/timing.py
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_map

from uncurated import objectives
from uncurated.objectives.tiled import policy

RESULT = Path(__file__).parent / "results" / "launch_count.json"
DIM = 256
COUNT_DIM = 8
"""The features' dimension of the counted step (the tiles are those the policy chooses at ``DIM``): the
operators dispatched do not depend on it (``tests/test_launch_count.py``), the cost of counting does."""
BATCHES = (16_384, 65_536)
POLICIES = ("cpu", "cuda")
LAUNCH_SECONDS = 5e-6
MATMUL_PEAKS = {"float32": 67e12, "tf32": 495e12, "bfloat16": 989e12}
"""Dense matrix-product FLOP/s of an H100 SXM by the products' type, NVIDIA's published peaks (H100 datasheet:
67 TFLOP/s FP32, 494.7 TF32 and 989.4 BF16 tensor core without sparsity): float32 products run IEEE on the CUDA
cores unless TF32 is allowed (``torch.backends.cuda.matmul.fp32_precision = "tf32"``)."""
HBM_BYTES_PER_SECOND = 3.35e12
NO_LAUNCH = {"detach", "_unsafe_view", "empty", "empty_strided", "new_empty", "empty_like", "lift_fresh"}
SAME_OPERATOR = {"scalar_tensor": "lift_fresh"}
"""A Python number wrapped as a tensor is ``lift_fresh`` with real operands and ``scalar_tensor`` with meta ones."""
SYNC = {"_local_scalar_dense"}


class LaunchCounter(TorchDispatchMode):
    """Counts the operators dispatched under it.

    With ``feature_dim`` and ``vector_length`` it runs shape-only where the data is the score matrix: a
    tensor with two dimensions larger than ``feature_dim``, or one dimension longer than ``vector_length``,
    lives on the ``meta`` device (see the module docstring); ``quadratic_bytes`` adds up the bytes such
    operators read and write.
    """

    def __init__(self, feature_dim: int | None = None, vector_length: int | None = None) -> None:
        super().__init__()
        self.feature_dim, self.vector_length = feature_dim, vector_length
        self.by_overload: Counter = Counter()
        self.quadratic_bytes = 0
        self.ones = _Ones()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        self.by_overload[func] += 1
        if self.feature_dim is None:
            return func(*args, **kwargs)
        return self._shape_only(func, args, kwargs)

    @property
    def counts(self) -> Counter[str]:
        """Dispatched operators by name (``add_``, ``mm``, ...)."""
        counts: Counter[str] = Counter()
        for func, count in self.by_overload.items():
            name = func.overloadpacket.__name__
            counts[SAME_OPERATOR.get(name, name)] += count
        return counts

    def summary(self) -> dict[str, int]:
        """``dispatched``; ``launches`` (see the module docstring), ``syncs`` and the ``no_launch`` rest."""
        quiet = sum(n for func, n in self.by_overload.items() if _launches_nothing(func))
        syncs = sum(n for func, n in self.by_overload.items() if func.overloadpacket.__name__ in SYNC)
        total = sum(self.by_overload.values())
        return {"dispatched": total, "launches": total - quiet - syncs, "syncs": syncs, "no_launch": quiet}

    # -- shape-only execution ------------------------------------------------------------------

    def quadratic(self, tensor: torch.Tensor) -> bool:
        shape = tensor.shape
        if len(shape) == 1:
            return shape[0] > self.vector_length
        return sum(size > self.feature_dim for size in shape) >= 2

    def _shape_only(self, func, args, kwargs):
        tensors = _tensors(args) + _tensors(kwargs.values())
        meta_input = any(t.is_meta for t in tensors)
        written = _written(func, args, kwargs)
        if any(self.ones.holds(t) for t in written):
            return written[0]  # writing into a stand-in for a small result: nothing to keep
        wide = any(t.ndim > 1 or (t.ndim == 1 and t.shape[0] > self.vector_length) for t in tensors)
        if meta_input or wide or not tensors:
            try:
                meta_out = func(*_to_meta(args), **{k: _to_meta(v) for k, v in kwargs.items()})
            except (NotImplementedError, RuntimeError):
                if meta_input:
                    raise  # a value read from the score matrix: the count would depend on the data
                return func(*args, **kwargs)  # data-dependent output shapes (unique, nonzero, item) on real data
            outputs = _tensors([meta_out])
            if not meta_input and not any(self.quadratic(t) for t in outputs):
                return func(*args, **kwargs)
        else:  # only short vectors in: nothing quadratic can come out but from a factory, handled above
            return func(*args, **kwargs)
        if not _launches_nothing(func):  # a view moves no data
            self.quadratic_bytes += sum(t.numel() * t.element_size() for t in tensors + outputs if self.quadratic(t))
        for tensor in written:
            if not tensor.is_meta:  # a real tensor updated from the score matrix
                tensor.fill_(1)  # its values do not matter, their finiteness does (the state refuses NaN)
        if written:
            return written[0] if len(written) == 1 else tuple(written)
        return tree_map(self._materialize, meta_out)

    def _materialize(self, value):
        """A small result of the score matrix: a contiguous stand-in of ones on the real device (see :class:`_Ones`)."""
        if not isinstance(value, torch.Tensor) or self.quadratic(value):
            return value
        return self.ones.tensor(value.shape, value.dtype)


class _Ones:
    """Contiguous tensors of ones that share one storage per type, each with its own version counter.

    Small results of the score matrix stand in as these: a fresh allocation per tile would cost more than
    the count, and a broadcast scalar is not contiguous (operators such as ``tensordot`` then decompose
    differently). Nothing is ever written into them (:meth:`LaunchCounter._shape_only` skips such writes).
    """

    def __init__(self) -> None:
        self.storages: dict[torch.dtype, torch.UntypedStorage] = {}

    def tensor(self, shape: torch.Size, dtype: torch.dtype) -> torch.Tensor:
        numel = math.prod(shape)
        storage = self.storages.get(dtype)
        if storage is None or storage.nbytes() < numel * torch.empty((), dtype=dtype).element_size():
            storage = self.storages[dtype] = torch.ones(max(numel, 1), dtype=dtype).untyped_storage()
        strides = [math.prod(shape[k + 1 :]) for k in range(len(shape))]
        return torch.empty(0, dtype=dtype).set_(storage, 0, shape, strides)

    def holds(self, tensor: torch.Tensor) -> bool:
        if tensor.is_meta:
            return False
        pointer = tensor.untyped_storage().data_ptr()
        return any(pointer == storage.data_ptr() for storage in self.storages.values())


_QUIET: dict = {}
_WRITES: dict = {}


def _launches_nothing(func) -> bool:
    """Views, and allocations and wrappers that run no kernel."""
    if func not in _QUIET:
        name = func.overloadpacket.__name__
        _QUIET[func] = func.is_view or SAME_OPERATOR.get(name, name) in NO_LAUNCH
    return _QUIET[func]


def _tensors(values) -> list[torch.Tensor]:
    found = []
    for value in values:
        if isinstance(value, torch.Tensor):
            found.append(value)
        elif isinstance(value, list | tuple):
            found += _tensors(value)
    return found


def _to_meta(value):
    if isinstance(value, torch.Tensor):
        if value.is_meta:
            return value
        return torch.empty_strided(value.shape, value.stride(), dtype=value.dtype, device="meta")
    if isinstance(value, list | tuple):
        return type(value)(_to_meta(item) for item in value)
    return value


def _written(func, args, kwargs) -> list[torch.Tensor]:
    """The tensors an in-place or ``out=`` operator writes, in the order of its schema."""
    if func not in _WRITES:
        _WRITES[func] = [
            (position, argument.name, argument.kwarg_only)
            for position, argument in enumerate(func._schema.arguments)
            if argument.alias_info is not None and argument.alias_info.is_write
        ]
    written = []
    for position, name, kwarg_only in _WRITES[func]:
        value = kwargs.get(name) if kwarg_only or position >= len(args) else args[position]
        written += _tensors([value])
    return written


# -- one training step of an objective -----------------------------------------------------------


def build(name: str, batch: int, tile_policy: str, **options) -> objectives.Objective:
    spec = objectives.OBJECTIVES[name]
    params = {"tile_policy": tile_policy, **options}
    if "num_samples" in spec.defaults():
        params["num_samples"] = batch
    objective = objectives.build(name, **params)
    objective.set_epoch(0.0)  # the schedules of the global objectives read it
    return objective


def step_inputs(batch: int, dim: int, seed: int = 0) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(batch, dim, generator=generator).requires_grad_()
    b = torch.randn(batch, dim, generator=generator).requires_grad_()
    return a, b, torch.arange(batch)


def count_step(
    name: str, batch: int, dim: int, tile_policy: str, *, shape_only: bool = True, **options
) -> LaunchCounter:
    """Count one training step (normalization, forward, backward into the feature leaves) of objective ``name``."""
    objective = build(name, batch, tile_policy, **options)
    a, b, index = step_inputs(batch, dim)
    objective.begin_step()
    counter = LaunchCounter(dim, 8 * batch) if shape_only else LaunchCounter()
    with counter:
        objective(a, b, index=index).backward()
    return counter


def tile_grid(name: str, batch: int, dim: int, tile_policy: str) -> dict:
    """What the policy chooses for the objective's default pairing at feature dimension ``dim``: the dense path,
    or tiles (``side``, the tile side before balancing, reproduces them as ``block_size``)."""
    objective = build(name, batch, tile_policy)
    size = batch * (2 if objective.pairing == "two_view" else 1)
    tiling, dtype = objective.tiling, torch.float32
    device = torch.device("cpu")
    if not tiling.use_tiles(size, size, dtype, device):
        return {"matrix": size, "path": "dense", "budget_bytes": tiling.budget(device)}
    rows, cols = tiling.block_shape(size, size, dim, dtype, device)
    return {
        "matrix": size,
        "path": "tiled",
        "budget_bytes": tiling.budget(device),
        "side": tiling.auto_block(dim, dtype, device),
        "tile": [rows, cols],
        "tiles": math.ceil(size / rows) * math.ceil(size / cols),
    }


def count_policy_step(name: str, batch: int, grid: dict, tile_policy: str, count_dim: int, **options) -> LaunchCounter:
    """Count a step with the dense path or the tiles of ``grid`` (chosen at the full dimension), at ``count_dim``;
    ``options``: the objective's parameters (``freeze_epochs`` past epoch 0 counts NUCLR's frozen step)."""
    if grid["path"] == "dense":
        return count_step(name, batch, count_dim, tile_policy, tiling="never", **options)
    return count_step(name, batch, count_dim, tile_policy, tiling="always", block_size=grid["side"], **options)


def predict(summary: dict, matrix: int, dim: int, quadratic_bytes: int) -> dict:
    """The model's times; the floor, the predicted step and the launches' share of the floor per type of the
    products (:data:`MATMUL_PEAKS`)."""
    launch = summary["launches"] * LAUNCH_SECONDS
    floors = {kind: 3 * 2 * matrix * matrix * dim / peak for kind, peak in MATMUL_PEAKS.items()}
    traffic = quadratic_bytes / HBM_BYTES_PER_SECOND
    return {
        "launch_ms": round(1e3 * launch, 2),
        "matmul_floor_ms": {kind: round(1e3 * floor, 2) for kind, floor in floors.items()},
        "predicted_ms": {kind: round(1e3 * (launch + floor), 2) for kind, floor in floors.items()},
        "launch_over_floor": {kind: round(launch / floor, 3) for kind, floor in floors.items()},
        "quadratic_gib": round(quadratic_bytes / 2**30, 1),
        "traffic_ms": round(1e3 * traffic, 1),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objectives", nargs="+", default=list(objectives.OBJECTIVES))
    parser.add_argument("--batches", nargs="+", type=int, default=list(BATCHES))
    parser.add_argument("--policies", nargs="+", default=list(POLICIES), choices=POLICIES)
    parser.add_argument("--dim", type=int, default=DIM)
    parser.add_argument("--count-dim", type=int, default=COUNT_DIM)
    parser.add_argument("--output", type=Path, default=RESULT)
    args = parser.parse_args()
    started, load = time.time(), os.getloadavg()[0]
    results = []
    for batch in args.batches:
        for name in args.objectives:
            for tile_policy in args.policies:
                clock = time.time()
                grid = tile_grid(name, batch, args.dim, tile_policy)
                counter = count_policy_step(name, batch, grid, tile_policy, args.count_dim)
                summary = counter.summary()
                row = {
                    "objective": name,
                    "batch": batch,
                    "tile_policy": tile_policy,
                    **grid,
                    **summary,
                    **predict(summary, grid["matrix"], args.dim, counter.quadratic_bytes),
                    "top_operators": dict(counter.counts.most_common(12)),
                }
                results.append(row)
                print(
                    f"B={batch:>6} {name:>8} {tile_policy:>4}: {grid['path']:>5} "
                    f"{grid.get('tiles', 1):>6} tiles, {summary['launches']:>8} launches "
                    f"({row['launch_ms']:.1f} ms against a {row['matmul_floor_ms']['bfloat16']:.1f} ms bf16 floor, "
                    f"{row['launch_over_floor']['bfloat16']:.2f}x), {time.time() - clock:.0f} s",
                    flush=True,
                )
    settings = {
        "dim": args.dim,
        "count_dim": args.count_dim,
        "dtype": "float32",
        "step": "L2 normalization, the objective's forward pass, its backward pass into the (B, d) features",
        "counting": "shape-only: score-matrix-sized operators on the meta device (see the module docstring)",
        "model": {
            "launch_seconds": LAUNCH_SECONDS,
            "matmul_flops_per_second": MATMUL_PEAKS,
            "matmul_peaks": "H100 SXM published dense peaks: float32 (IEEE, CUDA cores), TF32, bfloat16",
            "matmul_floor": "3 x 2 R C d flops (score product and two feature-gradient products), per products' type",
            "bfloat16": "the float32 step's launches against bfloat16's floor (a bfloat16 step was not counted)",
            "hbm_bytes_per_second": HBM_BYTES_PER_SECOND,
            "predicted_ms": "launch_ms + matmul_floor_ms, per products' type; traffic_ms beside it, not added",
        },
        "assumed_cuda_budget_bytes": policy.ASSUMED_CUDA_BUDGET,
        "cpu_budget_bytes": policy.DEFAULT_MEMORY_BUDGET,
        "load_average_start": load,
        "load_average_end": os.getloadavg()[0],
        "seconds": round(time.time() - started),
    }
    write_report(args.output, "launch_count", settings, results)


if __name__ == "__main__":
    main()
