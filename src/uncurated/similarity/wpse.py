"""Weighted point set similarity (WPSE, Uesaka et al. 2025): exact (Eq. 6) and by random features (Eqs. 8-9).

The similarity of two weighted point sets is the kernel double sum

    g(X, Y) = sum_{i, j} w_i^X w_j^Y k(v_i^X, v_j^Y)                      (Eq. 6)

With ``k = alpha1 u.v + alpha2 k~`` and ``k~`` replaced by random Fourier
features ``z`` (Eq. 9), every set becomes one vector

    e = [sqrt(alpha1) sum_i w_i v_i ; sqrt(alpha2) sum_i w_i z(v_i)]      (Eq. 8)

and the similarities of a batch are one matrix product ``E_X E_Y^T``, an
unbiased estimate of Eq. 6. These vectors are ordinary embeddings: every
objective of :mod:`uncurated.objectives` takes them, with ``normalize=False``
(WPSE normalizes the points, never the pooled vectors).

The paper and the official code (sony/wpse ``losses.py``) differ in three
ways, and the defaults here follow the code:

- pooling: the paper sums over the points (Eq. 8); the code takes the mean,
  so its similarities are the paper's divided by ``M_x M_y``
  (``pooling="mean"``, the default; ``"sum"`` is the paper's). The code's
  sets always have all their points (77 caption tokens, padding included);
  here a masked point is absent, and the mean is over each set's own points,
  so a set's vector does not depend on how far its batch was padded;
- points: the code L2-normalizes every point (eps 1e-6) before both parts
  (``point_eps=1e-6``, the default; ``None`` takes the points as given, as
  :func:`exact_similarity` does);
- the kernel mix: the code's example is ``(alpha1, alpha2) = (0.667, 0.333)``,
  the default of :class:`~uncurated.similarity.kernels.CombinedKernel`.

Two options of the code are off there and here: ``normalize_weights_p``
(divide each set's weights by their p-norm over the points, eps as the
points') and ``norm_linear_feat`` (L2-normalize the pooled linear part).
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..model_defaults import WPSE_EVAL_FEATURES as DEFAULT_EVAL_FEATURES
from ..model_defaults import WPSE_POOLING as DEFAULT_POOLING
from ..model_defaults import WPSE_POOLINGS as POOLINGS
from ..model_defaults import WPSE_TRAIN_FEATURES as DEFAULT_TRAIN_FEATURES
from ..validation import check_choice, check_range
from .kernels import CombinedKernel, random_fourier_features
from .point_set import WeightedPointSet

#: The eps of the official code's L2 normalization of every point (``None``: points as given).
DEFAULT_POINT_EPS = 1e-6


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
    sets: WeightedPointSet,
    kernel: CombinedKernel,
    draw: FeatureDraw | None,
    pooling: str = DEFAULT_POOLING,
    *,
    point_eps: float | None = DEFAULT_POINT_EPS,
    normalize_weights_p: float | None = None,
    norm_linear_feat: bool = False,
) -> Tensor:
    """Eq. 8: ``[sqrt(alpha1) pool_i w_i v_i ; sqrt(alpha2) pool_i w_i z(v_i)]``, shape (B, d + D).

    A part whose alpha is 0 is left out. ``pooling="mean"`` (the official
    code, the default) divides each set's weights by its number of points
    (M, or the points its mask keeps); ``"sum"`` is the paper's.
    ``point_eps``: L2-normalize each point first, ``v / max(|v|, eps)`` (the
    official code, eps 1e-6); ``None`` takes the points as given.
    ``normalize_weights_p``: divide each set's weights by their p-norm over
    its points (eps ``point_eps`` or 1e-12). ``norm_linear_feat``:
    L2-normalize the pooled linear part before the concatenation. The
    last two are the official code's options, off by default there too.
    """
    check_choice("pooling", pooling, POOLINGS)
    if point_eps is not None:
        check_range("point_eps", point_eps, 0.0, low_open=True)
    if normalize_weights_p is not None:
        check_range("normalize_weights_p", normalize_weights_p, 0.0, low_open=True)
    points = sets.points if point_eps is None else F.normalize(sets.points, p=2, dim=-1, eps=point_eps)
    weights = sets.effective_weights()
    if normalize_weights_p is not None:
        eps = 1e-12 if point_eps is None else point_eps
        weights = F.normalize(weights, p=normalize_weights_p, dim=1, eps=eps)
    if pooling == "mean":
        weights = weights / sets.counts().unsqueeze(1)
    parts = []
    if kernel.alpha1:
        linear = torch.einsum("bm,bmd->bd", weights, points)
        if norm_linear_feat:
            linear = F.normalize(linear, p=2, dim=1)
        parts.append(math.sqrt(kernel.alpha1) * linear)
    if kernel.alpha2:
        if draw is None:
            raise ValueError("a kernel with a nonlinear part (alpha2 > 0) needs a random feature draw")
        draw = draw.to(points)
        features = random_fourier_features(points, draw.frequencies, draw.phases)
        parts.append(math.sqrt(kernel.alpha2) * torch.einsum("bm,bmD->bD", weights, features))
    return torch.cat(parts, dim=1)


class WPSEmbedding(nn.Module):
    """Turns weighted point sets into the vectors of Eq. 8, with the paper's random-feature policy.

    In training mode each call draws fresh frequencies (``train_features``,
    D = 1024 in the paper); in eval mode a fixed draw of ``eval_features``
    (512), seeded by ``eval_seed`` and stored with the module, is used, and
    :meth:`redraw` replaces it (to average evaluations over draws). All sets
    passed to one call share its draw, as the two sides of a batch must.

    The defaults reproduce the official code's similarity (see the module
    documentation): mean pooling, points normalized with eps 1e-6, the
    kernel ``0.667 u.v + 0.333 Gaussian(0.5)``. ``pooling="sum",
    point_eps=None`` give the paper's Eq. 8 on the points as given, ``M_x M_y``
    times larger (15x for sets of 5 and 3 points).

    Args:
        kernel: a :class:`CombinedKernel` (default: ``CombinedKernel()``).
        train_features, eval_features: D in training and evaluation, >= 1.
        pooling: ``"mean"`` (the official code) or ``"sum"`` (the paper).
        point_eps, normalize_weights_p, norm_linear_feat: as for
            :func:`point_set_embedding`.
        seed: seeds the training draws (the generator is saved with the module).
        eval_seed: seeds the stored evaluation draw.
    """

    def __init__(
        self,
        kernel: CombinedKernel | None = None,
        *,
        train_features: int = DEFAULT_TRAIN_FEATURES,
        eval_features: int = DEFAULT_EVAL_FEATURES,
        pooling: str = DEFAULT_POOLING,
        point_eps: float | None = DEFAULT_POINT_EPS,
        normalize_weights_p: float | None = None,
        norm_linear_feat: bool = False,
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
        if point_eps is not None:
            check_range("point_eps", point_eps, 0.0, low_open=True)
        if normalize_weights_p is not None:
            check_range("normalize_weights_p", normalize_weights_p, 0.0, low_open=True)
        self.point_eps = point_eps
        self.normalize_weights_p = normalize_weights_p
        self.norm_linear_feat = bool(norm_linear_feat)
        self.generator = torch.Generator().manual_seed(seed)
        self.eval_draw: FeatureDraw | None = None
        self.eval_seed = eval_seed

    def redraw(self, seed: int, dim: int) -> FeatureDraw:
        """Replace the stored evaluation draw by the one ``seed`` gives for points of dimension ``dim``; return it."""
        generator = torch.Generator().manual_seed(seed)
        self.eval_draw = FeatureDraw.sample(self.kernel.nonlinear, self.eval_features, dim, generator)
        self.eval_seed = seed
        return self.eval_draw

    def forward(self, *sets: WeightedPointSet) -> tuple[Tensor, ...]:
        """The Eq. 8 vector of every batch of sets, all with the same random features."""
        if not sets:
            raise ValueError("pass at least one WeightedPointSet")
        dims = {s.dim for s in sets}
        if len(dims) != 1:
            raise ValueError(f"all point sets must have the same point dimension, got {sorted(dims)}")
        (dim,) = dims
        draw = self._draw(dim) if self.kernel.alpha2 else None
        return tuple(
            point_set_embedding(
                s,
                self.kernel,
                draw,
                self.pooling,
                point_eps=self.point_eps,
                normalize_weights_p=self.normalize_weights_p,
                norm_linear_feat=self.norm_linear_feat,
            )
            for s in sets
        )

    def _draw(self, dim: int) -> FeatureDraw:
        if self.training:
            return FeatureDraw.sample(self.kernel.nonlinear, self.train_features, dim, self.generator)
        if self.eval_draw is None or self.eval_draw.frequencies.shape[1] != dim:
            return self.redraw(self.eval_seed, dim)
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
            f"eval_features={self.eval_features}, pooling={self.pooling!r}, point_eps={self.point_eps}"
        )


def _check_dims(x: WeightedPointSet, y: WeightedPointSet) -> None:
    if x.dim != y.dim:
        raise ValueError(f"the two point sets must have points of the same dimension, got {x.dim} and {y.dim}")
