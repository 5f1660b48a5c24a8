"""Every kernel launch goes through :func:`launch`, which can record what it launched (:func:`recorded_launches`).

A record names the kernel, its grid, the type of each runtime argument, the
runtime arguments a GPU launch would specialize as divisible by 16, and the
value of each switch (a named tuple's fields as ``group.field``; a field left
out, ``None``, is a constant), which is enough to count launches per step and
to compile the same kernels for a GPU elsewhere, with the alignment hints a
launch adds (``benchmarks/triton_kernels.py``). Under Triton's interpreter a recorded
launch runs outside any ``TorchDispatchMode``: the interpreter copies the
arguments with PyTorch operators that a GPU launch never dispatches, and an
operator count should see what a GPU would.
"""

from __future__ import annotations

import inspect
from collections.abc import Iterator
from contextlib import AbstractContextManager, contextmanager, nullcontext
from dataclasses import dataclass, field
from functools import cache

import torch
from torch import Tensor
from torch.utils._python_dispatch import _disable_current_modes

from .support import interpreting

TYPE_CODES = {
    torch.float32: "fp32",
    torch.float16: "fp16",
    torch.bfloat16: "bf16",
    torch.float64: "fp64",
    torch.int64: "i64",
    torch.int32: "i32",
    torch.bool: "i1",
}


@dataclass(frozen=True)
class Launch:
    """One kernel launch: the kernel, its grid, its runtime arguments' types and its switches' values."""

    kernel: str
    grid: tuple[int, ...]
    signature: dict[str, str] = field(hash=False)
    switches: dict[str, object] = field(hash=False)
    warps: int = 4
    stages: int | None = None
    """``num_stages`` passed, or ``None``: none (Triton's default)."""
    divisible: frozenset[str] = frozenset()
    """The runtime arguments (flattened names) Triton's launcher marks ``tt.divisibility = 16``
    (:func:`divisible_by_16`)."""


_recorders: list[list[Launch]] = []


@contextmanager
def recorded_launches() -> Iterator[list[Launch]]:
    """The launches made inside the block, in order."""
    launches: list[Launch] = []
    _recorders.append(launches)
    try:
        yield launches
    finally:
        _recorders.remove(launches)


def launch(kernel, grid: tuple[int, ...], arguments: dict[str, object], warps: int, stages: int | None = None) -> None:
    """``kernel[grid](**arguments)`` with ``warps`` warps per program and ``stages`` software-pipeline stages
    (``None``: Triton's default, passed as nothing), on the CUDA device its tensors are on (:func:`on_device`),
    recorded where :func:`recorded_launches` asks."""
    options: dict[str, int] = {"num_warps": warps} if stages is None else {"num_warps": warps, "num_stages": stages}
    with on_device(arguments):
        _launch(kernel, grid, arguments, options)


def on_device(arguments: dict[str, object]) -> AbstractContextManager:
    """``torch.cuda.device`` of the arguments' first tensor where it is a CUDA one (nothing otherwise): Triton
    launches on the current device, so features on ``cuda:1`` would launch on ``cuda:0`` without it."""
    device = next((value.device for _, value in flattened(arguments) if isinstance(value, Tensor)), None)
    return torch.cuda.device(device) if device is not None and device.type == "cuda" else nullcontext()


def _launch(kernel, grid: tuple[int, ...], arguments: dict[str, object], options: dict[str, int]) -> None:
    warps, stages = options["num_warps"], options.get("num_stages")
    if not _recorders:
        kernel[grid](**arguments, **options)
        return
    switches = constexpr_names(kernel)
    flat = dict(flattened(arguments))
    runtime = {name: value for name, value in flat.items() if not _constant(name, value, switches)}
    record = Launch(
        kernel.fn.__name__,
        tuple(grid),
        {name: _type_code(value) for name, value in runtime.items()},
        {name: value for name, value in flat.items() if name not in runtime},
        warps,
        stages,
        frozenset(name for name, value in runtime.items() if divisible_by_16(value)),
    )
    for launches in _recorders:
        launches.append(record)
    if interpreting():
        with _disable_current_modes():
            kernel[grid](**arguments, **options)
    else:
        kernel[grid](**arguments, **options)


@cache
def constexpr_names(kernel) -> frozenset[str]:
    """The names of ``kernel``'s ``tl.constexpr`` parameters."""
    parameters = inspect.signature(kernel.fn).parameters.values()
    return frozenset(p.name for p in parameters if "constexpr" in str(p.annotation))


def flattened(arguments: dict[str, object]) -> Iterator[tuple[str, object]]:
    """The arguments with each named tuple's fields as ``group.field`` (:mod:`.arguments`)."""
    for name, value in arguments.items():
        if isinstance(value, tuple) and hasattr(value, "_fields"):
            for field_name, item in zip(value._fields, value, strict=True):
                yield f"{name}.{field_name}", item
        else:
            yield name, value


def _constant(name: str, value: object, switches: frozenset[str]) -> bool:
    """Whether a (flattened) argument is a compile-time constant: a switch, or a field left out (``None``)."""
    return name.split(".")[0] in switches or value is None


def divisible_by_16(value: object) -> bool:
    """Whether Triton's launcher specializes a runtime argument as divisible by 16 (Triton 3.3 to 3.9, on CUDA): a
    tensor whose address is a multiple of 16 bytes, an integer (not a bool) that is a multiple of 16. The compiler
    then assumes it (``tt.divisibility``), which lets it vectorize and pipeline the loads."""
    if isinstance(value, Tensor):
        return value.data_ptr() % 16 == 0
    return isinstance(value, int) and not isinstance(value, bool) and value % 16 == 0


def _type_code(value: object) -> str:
    if isinstance(value, Tensor):
        return "*" + TYPE_CODES[value.dtype]
    if isinstance(value, bool):
        return "i1"
    if isinstance(value, int):
        return "i32" if -(2**31) <= value < 2**31 else "i64"
    if isinstance(value, float):
        return "fp32"
    raise TypeError(f"a kernel argument of type {type(value).__name__}")
