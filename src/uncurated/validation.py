"""Argument checks shared by the whole package.

Every public entry point checks its inputs with these helpers so that bad input
fails early with a ``ValueError`` that names the argument, the accepted range
and the value received, instead of producing NaNs many steps later. The checks of
plain values (a choice, an integer) live in the torch-free :mod:`uncurated.checks`
and are re-exported here.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from numbers import Integral, Real

import torch
from torch import Tensor

from .checks import check_choice, check_integer
from .host_reads import check_later

__all__ = [
    "FEATURE_DTYPES",
    "check_choice",
    "check_features",
    "check_integer",
    "check_labels",
    "check_range",
    "check_sizes",
    "features_bound",
    "raise_nonfinite",
]

FEATURE_DTYPES = (torch.float64, torch.float32, torch.bfloat16, torch.float16)
"""The feature types every engine computes in; float8 and other narrower types must be widened by the caller."""


def _as_float(name: str, value: float | Tensor) -> float:
    if isinstance(value, Tensor):
        if value.numel() != 1:
            raise ValueError(f"{name} must be a scalar, got a tensor of shape {tuple(value.shape)}")
        return float(value.detach())
    if isinstance(value, bool) or not isinstance(value, Real):
        raise ValueError(f"{name} must be a real number, got {value!r}")
    return float(value)


def check_range(
    name: str,
    value: float | Tensor,
    low: float = -math.inf,
    high: float = math.inf,
    *,
    low_open: bool = False,
    high_open: bool = False,
) -> float:
    """Return ``value`` as a float if it lies in the interval, else raise ``ValueError``.

    The interval is ``[low, high]``; ``low_open``/``high_open`` exclude an end.
    """
    number = _as_float(name, value)
    too_low = number <= low if low_open else number < low
    too_high = number >= high if high_open else number > high
    if math.isnan(number) or too_low or too_high:
        left = "(" if low_open else "["
        right = ")" if high_open else "]"
        raise ValueError(f"{name} must be in {left}{low:g}, {high:g}{right}, got {number:g}")
    return number


def check_features(
    a: Tensor, b: Tensor, *, names: tuple[str, str] = ("a", "b"), min_batch: int = 2, finite: bool = True
) -> None:
    """Check a batch of paired embeddings: two finite (B, d) tensors with B >= ``min_batch`` (2, for a negative;
    1 for one process's share of a batch split across processes).

    The shapes and types are checked on the host; finiteness needs a read from the device (a synchronization on
    a GPU), made with the call's next one within :func:`~uncurated.host_reads.pending_checks`, and skipped with
    ``finite=False`` by a caller that has checked it already.
    """
    for name, x in zip(names, (a, b), strict=True):
        if not isinstance(x, Tensor):
            raise ValueError(f"{name} must be a torch.Tensor of shape (batch, dim), got {type(x).__name__}")
        if x.ndim != 2:
            raise ValueError(f"{name} must have shape (batch, dim), got shape {tuple(x.shape)}")
        if not x.is_floating_point():
            raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
        if x.dtype not in FEATURE_DTYPES:
            accepted = ", ".join(str(t).removeprefix("torch.") for t in FEATURE_DTYPES)
            raise ValueError(
                f"{name} must be of type {accepted} (widen narrower types first), "
                f"got {str(x.dtype).removeprefix('torch.')}"
            )
    if a.shape != b.shape:
        raise ValueError(
            f"{names[0]} and {names[1]} must have the same shape (batch, dim), "
            f"got {tuple(a.shape)} and {tuple(b.shape)}"
        )
    if a.shape[0] < min_batch:
        need = "to have a negative" if min_batch == 2 else "on every process"
        raise ValueError(f"batch size must be at least {min_batch} {need}, got {a.shape[0]}")
    if finite:

        def check(bound: list[float]) -> None:
            if not math.isfinite(bound[0]):
                raise_nonfinite(a, b, names)

        check_later(features_bound(a, b), check)


def features_bound(*tensors: Tensor) -> Tensor:
    """The largest magnitude in ``tensors`` as a 0-d tensor on their device (0 if all are empty), not read: NaN
    and inf propagate through it, so it is finite exactly when every value is."""
    tensors = tuple(x for x in tensors if x.numel())
    if not tensors:
        return torch.zeros(())
    with torch.no_grad():
        norms = torch._foreach_norm(list(tensors), math.inf)
        bound = norms[0]
        for norm in norms[1:]:
            bound = torch.maximum(bound, norm)
        return bound


def raise_nonfinite(a: Tensor, b: Tensor, names: tuple[str, str] = ("a", "b")) -> None:
    """Raise the ``ValueError`` of :func:`check_features` for the first of ``a``, ``b`` with a NaN or an inf
    (reads from the device: for the error path, once :func:`features_bound` was found non-finite)."""
    for name, x in zip(names, (a, b), strict=True):
        if not bool(torch.isfinite(x).all()):
            raise ValueError(f"{name} contains non-finite values (NaN or inf)")


def check_labels(labels: Tensor, batch_size: int) -> None:
    """Check class labels for a batch of ``batch_size`` pairs: an integer tensor of shape (B,)."""
    if not isinstance(labels, Tensor) or labels.is_floating_point() or labels.is_complex():
        raise ValueError(f"labels must be an integer tensor of shape ({batch_size},), got {labels!r:.80}")
    if labels.shape != (batch_size,):
        raise ValueError(f"labels must have shape ({batch_size},) (one per pair), got {tuple(labels.shape)}")


def check_sizes(name: str, values: Iterable[int], low: int = 1) -> tuple[int, ...]:
    """Return ``values`` as a non-empty tuple of integers ``>= low`` (layer widths, block counts), else raise."""
    sizes = () if isinstance(values, (str, bytes)) or not isinstance(values, Iterable) else tuple(values)
    if not sizes or any(isinstance(v, bool) or not isinstance(v, Integral) or v < low for v in sizes):
        raise ValueError(f"{name} must be a non-empty sequence of integers >= {low}, got {values!r}")
    return tuple(int(v) for v in sizes)
