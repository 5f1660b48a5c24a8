"""Weighted point set similarity (WPSE, seed 002): exact (Eq. 6) and by random features (Eqs. 8-9).

The similarity of two weighted point sets is the kernel double sum

    g(X, Y) = sum_{i, j} w_i^X w_j^Y k(v_i^X, v_j^Y)                      (Eq. 6)

With ``k = alpha1 u.v + alpha2 k~`` and ``k~`` replaced by random Fourier
features ``z`` (Eq. 9), every set becomes one vector

    e = [sqrt(alpha1) sum_i w_i v_i ; sqrt(alpha2) sum_i w_i z(v_i)]      (Eq. 8)

and the similarities of a batch are one matrix product ``E_X E_Y^T``, an
unbiased estimate of Eq. 6. These vectors are ordinary embeddings: every
objective of :mod:`uncurated.objectives` takes them, with ``normalize=False``
(WPSE normalizes the points, never the pooled vectors).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
from torch import Tensor, nn

from ..validation import check_choice, check_range
from .kernels import CombinedKernel, random_fourier_features
from .point_set import WeightedPointSet

POOLINGS = ("sum", "mean")


def exact_similarity(x: WeightedPointSet, y: WeightedPointSet, kernel) -> Tensor:
    """Eq. 6 for every pair: (B_x, B_y) similarities, O(B_x B_y M_x M_y d). For tests and small M."""
    _check_dims(x, y)
    pairwise = kernel(x.points[:, None], y.points[None])  # (B_x, B_y, M_x, M_y)
    return torch.einsum("bm,ck,bcmk->bc", x.effective_weights(), y.effective_weights(), pairwise)


@dataclass(frozen=True)
class FeatureDraw:
    """One draw of random Fourier features: ``frequencies`` (D, d) and ``phases`` (D,)."""

    frequencies: Tensor
    phases: Tensor

    @classmethod
    def sample(cls, kernel, count: int, dim: int, generator: torch.Generator, dtype=torch.float32) -> FeatureDraw:
        """``count`` frequencies from ``kernel``'s spectral density and phases uniform on [0, 2 pi)."""
        if isinstance(count, bool) or not isinstance(count, int) or count < 1:
            raise ValueError(f"the number of random features D must be an integer >= 1, got {count!r}")
        frequencies = kernel.sample_frequencies(count, dim, generator, dtype)
        phases = 2 * math.pi * torch.rand(count, generator=generator, dtype=dtype)
        return cls(frequencies, phases)

    def to(self, like: Tensor) -> FeatureDraw:
        return FeatureDraw(self.frequencies.to(like), self.phases.to(like))


def point_set_embedding(
    sets: WeightedPointSet, kernel: CombinedKernel, draw: FeatureDraw | None, pooling: str = "sum"
) -> Tensor:
    """Eq. 8: ``[sqrt(alpha1) sum_i w_i v_i ; sqrt(alpha2) sum_i w_i z(v_i)]``, shape (B, d + D).

    A part whose alpha is 0 is left out. ``pooling="mean"`` divides the
    weights by M (the official code's choice; the paper sums).
    """
    check_choice("pooling", pooling, POOLINGS)
    weights = sets.effective_weights()
    if pooling == "mean":
        weights = weights / sets.size
    parts = []
    if kernel.alpha1:
        parts.append(math.sqrt(kernel.alpha1) * torch.einsum("bm,bmd->bd", weights, sets.points))
    if kernel.alpha2:
        if draw is None:
            raise ValueError("a kernel with a nonlinear part (alpha2 > 0) needs a random feature draw")
        draw = draw.to(sets.points)
        features = random_fourier_features(sets.points, draw.frequencies, draw.phases)
        parts.append(math.sqrt(kernel.alpha2) * torch.einsum("bm,bmD->bD", weights, features))
    return torch.cat(parts, dim=1)


class WPSEmbedding(nn.Module):
    """Turns weighted point sets into the vectors of Eq. 8, with the paper's random-feature policy.

    In training mode each call draws fresh frequencies (``train_features``,
    D = 1024 in the paper); in eval mode a fixed draw of ``eval_features``
    (512), seeded by ``eval_seed`` and stored with the module, is used, and
    :meth:`redraw` replaces it (to average evaluations over draws). All sets
    passed to one call share its draw, as the two sides of a batch must.

    Args:
        kernel: a :class:`CombinedKernel` (default: ``u.v + Gaussian(0.5)``).
        train_features, eval_features: D in training and evaluation, >= 1.
        pooling: ``"sum"`` (the paper) or ``"mean"`` (the official code).
        seed: seeds the training draws (the generator is saved with the module).
        eval_seed: seeds the stored evaluation draw.
    """

    def __init__(
        self,
        kernel: CombinedKernel | None = None,
        *,
        train_features: int = 1024,
        eval_features: int = 512,
        pooling: str = "sum",
        seed: int = 0,
        eval_seed: int = 0,
    ) -> None:
        super().__init__()
        self.kernel = CombinedKernel() if kernel is None else kernel
        for name, value in (("train_features", train_features), ("eval_features", eval_features)):
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"{name} (D) must be an integer >= 1, got {value!r}")
        self.train_features = train_features
        self.eval_features = eval_features
        self.pooling = check_choice("pooling", pooling, POOLINGS)
        self.generator = torch.Generator().manual_seed(seed)
        self.eval_draw: FeatureDraw | None = None
        self.eval_seed = eval_seed

    def redraw(self, seed: int, dim: int) -> None:
        """Replace the stored evaluation draw by the one ``seed`` gives for points of dimension ``dim``."""
        generator = torch.Generator().manual_seed(seed)
        self.eval_draw = FeatureDraw.sample(self.kernel.nonlinear, self.eval_features, dim, generator)
        self.eval_seed = seed

    def forward(self, *sets: WeightedPointSet) -> tuple[Tensor, ...]:
        """The Eq. 8 vector of every batch of sets, all with the same random features."""
        if not sets:
            raise ValueError("pass at least one WeightedPointSet")
        dims = {s.dim for s in sets}
        if len(dims) != 1:
            raise ValueError(f"all point sets must have the same point dimension, got {sorted(dims)}")
        (dim,) = dims
        draw = self._draw(dim) if self.kernel.alpha2 else None
        return tuple(point_set_embedding(s, self.kernel, draw, self.pooling) for s in sets)

    def _draw(self, dim: int) -> FeatureDraw:
        if self.training:
            return FeatureDraw.sample(self.kernel.nonlinear, self.train_features, dim, self.generator)
        if self.eval_draw is None or self.eval_draw.frequencies.shape[1] != dim:
            self.redraw(self.eval_seed, dim)
        return self.eval_draw

    def embedding_dim(self, dim: int) -> int:
        """The length of the vectors for points of dimension ``dim`` in the current mode."""
        count = self.train_features if self.training else self.eval_features
        return dim * bool(self.kernel.alpha1) + count * bool(self.kernel.alpha2)

    def get_extra_state(self) -> dict:
        state = {"generator": self.generator.get_state(), "eval_seed": self.eval_seed}
        if self.eval_draw is not None:
            state["eval_draw"] = (self.eval_draw.frequencies, self.eval_draw.phases)
        return state

    def set_extra_state(self, state: dict) -> None:
        self.generator.set_state(state["generator"])
        self.eval_seed = state["eval_seed"]
        self.eval_draw = FeatureDraw(*state["eval_draw"]) if "eval_draw" in state else None

    def extra_repr(self) -> str:
        return (
            f"kernel={self.kernel!r}, train_features={self.train_features}, "
            f"eval_features={self.eval_features}, pooling={self.pooling!r}"
        )


def _check_dims(x: WeightedPointSet, y: WeightedPointSet) -> None:
    if x.dim != y.dim:
        raise ValueError(f"the two point sets must have points of the same dimension, got {x.dim} and {y.dim}")
