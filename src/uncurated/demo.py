"""The objectives side by side on one batch of real images, before any training.

:func:`objective_table` takes a batch of images, makes two augmented views of
each with plain tensor operations, embeds both views with one fixed random
projection and evaluates every objective of :func:`uncurated.objectives.available`
under both pairings: the loss and the norm of its gradient with respect to the
embeddings. Nothing is trained, so the table shows each objective's scale and
gradient size on the same inputs, not the quality of what it would learn.
"""

from __future__ import annotations

import math
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from typing import TextIO

import torch
import torch.nn.functional as F
from torch import Tensor

from . import objectives
from .validation import check_range

PAIRINGS = ("two_view", "cross")

#: Parameters every objective has; the table shows ``temperature``, and ``direction_reduction`` when it is not the mean.
COMMON_PARAMETERS = (
    "temperature",
    "learnable",
    "temperature_parametrization",
    "pairing",
    "direction_reduction",
    "normalize",
    "group",
    "tiling",
    "block_size",
    "memory_budget",
    "distributed",
    "tile_policy",
    "compile",
)

#: Settings of the schedules and of the global objectives' state updates (optimizers, ablations, placement), not
#: shown: the table keeps to the parameters that shape the loss of one batch.
STATE_SETTINGS = (
    "beta_changes",
    "q_warmup_epochs",
    "q_start",
    "num_samples",
    "gamma_schedule",
    "gamma_decay_epochs",
    "state_device",
    "state_dtype",
    "temperature_min",
    "temperature_max",
    "temperature_lr",
    "temperature_optimizer",
    "temperature_beta",
    "temperature_grad_clip",
    "betas",
    "xi_init",
    "zeta_lr",
    "zeta_momentum",
    "zeta_update",
    "zeta_theta",
    "zeta_schedule",
    "zeta_lr_ratio_a",
    "xi_rule",
    "freeze_epochs",
    "epochs",
    "learn_zeta",
    "xi_trick",
)

#: The largest translation of an augmented view, in pixels, and the standard deviation of its noise.
MAX_SHIFT = 2
NOISE_STD = 0.05


@dataclass(frozen=True)
class PairingResult:
    """The loss of one objective under one pairing and the norm of its gradient."""

    loss: float
    grad_norm: float


@dataclass(frozen=True)
class ObjectiveRow:
    """One objective evaluated on the demo batch: its parameters and a result per pairing."""

    name: str
    parameters: dict[str, object]
    default_pairing: str
    results: dict[str, PairingResult]


def objective_table(images: Tensor, *, batch_size: int = 256, dim: int = 128, seed: int = 0) -> list[ObjectiveRow]:
    """Evaluate every objective on two augmented views of the first ``batch_size`` images.

    Args:
        images: a (N, H, W) tensor, uint8 in 0..255 or floating point in [0, 1].
        batch_size: how many images to use, in [2, N].
        dim: the embedding dimension, at least 1.
        seed: seeds the random projection and the augmentations.

    Returns:
        One :class:`ObjectiveRow` per objective, in the order of
        :func:`uncurated.objectives.available`, each with the loss and the
        gradient norm with respect to the concatenated embeddings ``[a; b]``
        for the ``"two_view"`` and the ``"cross"`` pairing.
    """
    if not isinstance(images, Tensor) or images.ndim != 3:
        got = f"shape {tuple(images.shape)}" if isinstance(images, Tensor) else type(images).__name__
        raise ValueError(f"images must be a tensor of shape (N, H, W), got {got}")
    _check_count("batch_size", batch_size, 2, len(images))
    _check_count("dim", dim, 1)
    generator = torch.Generator().manual_seed(seed)
    pixels = images.shape[1] * images.shape[2]
    projection = torch.randn(pixels, dim, generator=generator) / math.sqrt(pixels)
    batch = _as_unit_float(images[:batch_size])
    a = augment(batch, generator).flatten(1) @ projection
    b = augment(batch, generator).flatten(1) @ projection
    return [
        ObjectiveRow(
            name=spec.name,
            parameters=_shown_parameters(spec.defaults),
            default_pairing=str(spec.defaults["pairing"]),
            results={pairing: _evaluate(spec, pairing, a, b) for pairing in PAIRINGS},
        )
        for spec in objectives.available()
    ]


def augment(images: Tensor, generator: torch.Generator) -> Tensor:
    """A random view of each (H, W) image: shifted up to 2 pixels, maybe flipped, with gaussian noise.

    The shift pads with zeros and crops back to (H, W); each image is flipped
    with probability 1/2; the noise has standard deviation 0.05. All draws come
    from ``generator``.
    """
    count, height, width = images.shape
    padded = F.pad(images, (MAX_SHIFT,) * 4)
    top = torch.randint(0, 2 * MAX_SHIFT + 1, (count, 1, 1), generator=generator)
    left = torch.randint(0, 2 * MAX_SHIFT + 1, (count, 1, 1), generator=generator)
    rows = top + torch.arange(height).view(1, height, 1)
    cols = left + torch.arange(width).view(1, 1, width)
    shifted = padded[torch.arange(count).view(count, 1, 1), rows, cols]
    flip = torch.rand(count, 1, 1, generator=generator) < 0.5
    views = torch.where(flip, shifted.flip(-1), shifted)
    return views + NOISE_STD * torch.randn(views.shape, generator=generator)


def format_parameters(parameters: dict[str, object]) -> str:
    """``name=value`` pairs separated by spaces, floats in their shortest form."""
    return " ".join(f"{name}={_format_value(value)}" for name, value in parameters.items())


def format_objective_table(rows: Sequence[ObjectiveRow]) -> str:
    """The rows as an aligned text table; ``*`` marks each objective's default pairing."""
    header = ["objective", "parameters"]
    for pairing in PAIRINGS:
        header += [f"{pairing} loss", f"{pairing} |grad|"]
    lines = [header]
    for row in rows:
        cells = [row.name, format_parameters(row.parameters)]
        for pairing in PAIRINGS:
            mark = "*" if pairing == row.default_pairing else " "
            result = row.results[pairing]
            cells += [f"{result.loss:.4f}{mark}", f"{result.grad_norm:.4f} "]
        lines.append(cells)
    widths = [max(len(line[column]) for line in lines) for column in range(len(header))]
    text = []
    for line in lines:
        left = [cell.ljust(width) for cell, width in zip(line[:2], widths[:2], strict=True)]
        right = [cell.rjust(width) for cell, width in zip(line[2:], widths[2:], strict=True)]
        text.append("  ".join(left + right).rstrip())
    text.insert(1, "-" * len(text[0]))
    return "\n".join(text)


def print_objective_table(
    rows: Sequence[ObjectiveRow],
    *,
    batch_size: int,
    dim: int,
    seed: int,
    source: str = "Fashion-MNIST test",
    file: TextIO | None = None,
) -> None:
    """Print what the table is, then the table of :func:`format_objective_table`."""
    file = sys.stdout if file is None else file
    print(
        f"{source} batch of {batch_size} images, two augmented views each (shift <= {MAX_SHIFT} px, "
        f"flip, noise), one fixed random projection to {dim} dims (seed {seed}).\n"
        "Untrained: the values show each objective's scale and gradient size on the same batch,"
        " not quality.\n"
        "|grad| is the norm of the loss's gradient with respect to the embeddings [a; b];"
        " * marks each objective's default pairing.\n",
        file=file,
    )
    print(format_objective_table(rows), file=file)


def _format_value(value: object) -> str:
    return f"{value:g}" if isinstance(value, float) else str(value)


def _evaluate(spec: objectives.ObjectiveSpec, pairing: str, a: Tensor, b: Tensor) -> PairingResult:
    """Loss and gradient norm of one objective; a global objective sees the batch as its whole dataset."""
    a = a.detach().clone().requires_grad_(True)
    b = b.detach().clone().requires_grad_(True)
    objective = objectives.build(spec.name, pairing=pairing, **({"num_samples": a.shape[0]} if spec.stateful else {}))
    objective.set_epoch(0)
    loss = objective(a, b, index=torch.arange(a.shape[0]))
    grad_a, grad_b = torch.autograd.grad(loss, (a, b))
    return PairingResult(float(loss.detach()), float(torch.cat([grad_a, grad_b]).norm()))


def _shown_parameters(defaults: dict[str, object]) -> dict[str, object]:
    shown = {"temperature": defaults["temperature"]}
    if defaults.get("direction_reduction", "mean") != "mean":
        shown["direction_reduction"] = defaults["direction_reduction"]
    own = {
        name: value for name, value in defaults.items() if name not in COMMON_PARAMETERS and name not in STATE_SETTINGS
    }
    return {**shown, **own}


def _as_unit_float(images: Tensor) -> Tensor:
    if images.dtype == torch.uint8:
        return images.float() / 255.0
    if images.is_floating_point():
        return images.float()
    raise ValueError(f"images must be uint8 or floating point, got dtype {images.dtype}")


def _check_count(name: str, value: int, low: int, high: float = math.inf) -> None:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"{name} must be an integer, got {value!r}")
    check_range(name, value, low, high)
