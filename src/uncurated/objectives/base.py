"""What every batch objective shares: input checks, the pairings, the reduction over directions.

An objective is written as a *row loss*: a function from a
:class:`~uncurated.objectives.engine.ScoreMatrix` to one loss per anchor, built
from the matrix's row statistics. :func:`contrastive_loss` turns a row loss into
the batch objective for either pairing, and :class:`ContrastiveObjective` is the
``nn.Module`` base holding the parameters every objective has.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable
from functools import partial
from typing import ClassVar

import torch.nn.functional as F
from torch import Tensor, nn

from ..validation import check_choice, check_features, check_labels, check_range
from .engine import PAIRINGS, ScoreMatrix, cross_pairing, two_view_pairing
from .temperature import Temperature
from .tiled import TiledScoreMatrix, Tiling, fused_map

RowLoss = Callable[[ScoreMatrix], Tensor]
DIRECTION_REDUCTIONS = ("mean", "sum")


def prepare_features(a: Tensor, b: Tensor, normalize: bool) -> tuple[Tensor, Tensor]:
    """Check a pair of (B, d) embedding batches and L2-normalize them unless told not to."""
    check_features(a, b)
    if normalize:
        return F.normalize(a, dim=-1), F.normalize(b, dim=-1)
    return a, b


def check_temperature(temperature: float | Tensor) -> None:
    check_range("temperature", temperature, 0.0, low_open=True)


def score_matrices(
    a: Tensor,
    b: Tensor,
    *,
    temperature: float | Tensor,
    pairing: str,
    labels: Tensor | None = None,
    extra_positives: Tensor | None = None,
    tiling: Tiling | None = None,
) -> tuple[ScoreMatrix, ...]:
    """The score matrices of a batch: two (one per direction) for ``cross``, one for ``two_view``.

    ``a`` and ``b`` must already be checked and, if wanted, normalized.
    ``tiling`` decides whether they are dense or tiled (default: dense).
    """
    check_choice("pairing", pairing, PAIRINGS)
    check_temperature(temperature)
    if labels is not None:
        check_labels(labels, a.shape[0])
        labels = labels.to(a.device)
    scale = 1.0 / temperature
    size = a.shape[0] * (2 if pairing == "two_view" else 1)
    matrix = ScoreMatrix
    if tiling is not None and tiling.use_tiles(size, size, a.dtype):
        matrix = partial(TiledScoreMatrix, tiling=tiling)
    if pairing == "cross":
        if extra_positives is not None:
            raise ValueError("extra_positives is supported with pairing='two_view' only")
        return cross_pairing(a, b, scale, labels, matrix=matrix)
    return two_view_pairing(a, b, scale, labels, extra_positives, matrix=matrix)


def tiling_options(tiling: str | Tiling = "auto", block_size: int | None = None, memory_budget: int | None = None) -> Tiling:
    """The :class:`~uncurated.objectives.tiled.Tiling` of the three options (checked; ``ValueError`` if bad)."""
    if isinstance(tiling, Tiling):
        return tiling
    return Tiling(tiling, block_size, memory_budget)


def contrastive_loss(
    row_loss: RowLoss,
    a: Tensor,
    b: Tensor,
    *,
    temperature: float | Tensor,
    pairing: str,
    direction_reduction: str = "mean",
    normalize: bool = True,
    labels: Tensor | None = None,
    extra_positives: Tensor | None = None,
    tiling: str | Tiling = "auto",
    block_size: int | None = None,
    memory_budget: int | None = None,
) -> Tensor:
    """The batch objective of ``row_loss``: the mean over anchors, then over or summed across directions.

    With ``pairing="cross"`` the row loss is applied to both directions (a to b
    and b to a) and the two means are combined by ``direction_reduction``; with
    ``"two_view"`` it is the mean over the 2B anchors. ``tiling``,
    ``block_size`` and ``memory_budget`` choose the dense or the tiled engine
    (:mod:`uncurated.objectives.tiled`); both give the same values.
    """
    check_choice("direction_reduction", direction_reduction, DIRECTION_REDUCTIONS)
    options = tiling_options(tiling, block_size, memory_budget)
    a, b = prepare_features(a, b, normalize)
    if extra_positives is not None:
        extra_positives = _prepare_extra_positives(extra_positives, a, normalize)
    matrices = score_matrices(
        a, b, temperature=temperature, pairing=pairing, labels=labels, extra_positives=extra_positives, tiling=options
    )
    total = sum(rows.mean() for rows in fused_map(row_loss, matrices))
    if direction_reduction == "mean":
        total = total / len(matrices)
    return total


def _prepare_extra_positives(extra: Tensor, a: Tensor, normalize: bool) -> Tensor:
    batch, dim = a.shape
    if not isinstance(extra, Tensor) or extra.ndim != 3 or extra.shape[0] != batch or extra.shape[2] != dim:
        shape = getattr(extra, "shape", None)
        raise ValueError(f"extra_positives must have shape ({batch}, M - 1, {dim}), got {shape}")
    if not bool(extra.isfinite().all()):
        raise ValueError("extra_positives contains non-finite values (NaN or inf)")
    return F.normalize(extra, dim=-1) if normalize else extra


class ContrastiveObjective(nn.Module):
    """Base of the batch objectives: temperature, pairing, direction reduction, normalization.

    Subclasses set ``name`` (the key of :func:`uncurated.objectives.build`),
    their paper's defaults in the ``default_*`` class attributes, take their
    own parameters in ``__init__`` and pass the common ones on, and implement
    ``forward(a, b, ...)`` by calling their functional twin with
    ``**self.common_options()``.

    Args:
        temperature: the temperature ``t`` of the scores ``cos / t`` (> 0);
            ``None`` takes the objective's default.
        learnable: learn the temperature (CLIP's log inverse temperature, at most 100).
        temperature_parametrization: how a learnable temperature is learned:
            ``"log"`` (CLIP) or ``"identity"`` (WPSE: ``1/t`` itself in [1, 100]).
        pairing: ``"cross"`` (``a[i]`` pairs with ``b[i]``, both directions scored,
            CLIP style) or ``"two_view"`` (the SimCLR batch of 2B anchors over
            ``[a; b]``, own view masked, N = 2B - 2 negatives); ``None`` takes
            the objective's default.
        direction_reduction: ``"mean"`` or ``"sum"`` of the two directions of a
            cross pairing (ignored for two views); ``None`` takes the default.
        normalize: L2-normalize the embeddings first (scores are cosines / t).
        tiling: ``"auto"`` (tile when the dense score matrix would exceed
            ``memory_budget``), ``"always"`` or ``"never"``; tiles keep memory
            linear in the batch (:mod:`uncurated.objectives.tiled`).
        block_size: the side of the tiles (>= 1), ``None`` to choose it from
            the batch, the dimension and the budget.
        memory_budget: bytes for the score-matrix work (>= 1 MiB), ``None``
            for the default of 1 GiB.
    """

    name: ClassVar[str] = ""
    default_temperature: ClassVar[float] = 0.07
    default_pairing: ClassVar[str] = "cross"
    default_direction_reduction: ClassVar[str] = "mean"
    default_learnable: ClassVar[bool] = False

    def __init__(
        self,
        temperature: float | None = None,
        *,
        learnable: bool | None = None,
        temperature_parametrization: str = "log",
        pairing: str | None = None,
        direction_reduction: str | None = None,
        normalize: bool = True,
        tiling: str = "auto",
        block_size: int | None = None,
        memory_budget: int | None = None,
    ) -> None:
        super().__init__()
        self.tiling = tiling_options(tiling, block_size, memory_budget)
        self.temperature = Temperature(
            self.default_temperature if temperature is None else temperature,
            self.default_learnable if learnable is None else learnable,
            temperature_parametrization,
        )
        self.pairing = check_choice("pairing", pairing or self.default_pairing, PAIRINGS)
        if self.default_direction_reduction is None:
            if direction_reduction is not None:
                raise ValueError(f"direction_reduction does not apply to {self.name}: it scores each pair once")
            self.direction_reduction = None
        else:
            self.direction_reduction = check_choice(
                "direction_reduction", direction_reduction or self.default_direction_reduction, DIRECTION_REDUCTIONS
            )
        self.normalize = bool(normalize)

    @classmethod
    def defaults(cls) -> dict[str, object]:
        """Every constructor parameter with its default, the common ones first."""
        common = {
            "temperature": cls.default_temperature,
            "learnable": cls.default_learnable,
            "temperature_parametrization": "log",
            "pairing": cls.default_pairing,
            "direction_reduction": cls.default_direction_reduction,
            "normalize": True,
            "tiling": "auto",
            "block_size": None,
            "memory_budget": None,
        }
        if cls.default_direction_reduction is None:
            del common["direction_reduction"]
        own = {
            name: parameter.default
            for name, parameter in inspect.signature(cls.__init__).parameters.items()
            if name != "self" and name not in common
            and parameter.kind not in (parameter.VAR_POSITIONAL, parameter.VAR_KEYWORD)
        }
        return {**common, **own}

    def common_options(self) -> dict:
        """Keyword arguments every functional twin takes, from this module's settings."""
        return {
            "temperature": self.temperature(),
            "pairing": self.pairing,
            "direction_reduction": self.direction_reduction,
            "normalize": self.normalize,
            **self.tiling_options(),
        }

    def tiling_options(self) -> dict:
        """``tiling``, ``block_size`` and ``memory_budget`` as this module was given them."""
        return {
            "tiling": self.tiling.mode,
            "block_size": self.tiling.block_size,
            "memory_budget": self.tiling.memory_budget,
        }

    def extra_repr(self) -> str:
        text = f"pairing={self.pairing!r}, direction_reduction={self.direction_reduction!r}, normalize={self.normalize}"
        if self.tiling != Tiling():
            text += f", tiling={self.tiling.mode!r}, block_size={self.tiling.block_size}, memory_budget={self.tiling.memory_budget}"
        return text
