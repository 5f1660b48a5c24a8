"""Kernels between points for weighted point set similarities (Uesaka et al. 2025, Secs. 5.2-5.3).

A kernel evaluates ``k(u, v)`` between every point of one batch of sets and
every point of another. Shift-invariant kernels with ``k(0) = 1`` also draw
random Fourier frequencies from their spectral density ``p_omega``, so that
``k(u - v) = E[2 cos(omega.u + b) cos(omega.v + b)]`` (Eq. 9).
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..model_defaults import KERNEL_SCALE as DEFAULT_SCALE
from ..model_defaults import KERNEL_WEIGHTS as DEFAULT_KERNEL_WEIGHTS
from ..model_defaults import NONLINEAR_KERNEL as DEFAULT_NONLINEAR
from ..model_defaults import NONLINEAR_KERNEL_NAMES
from ..validation import check_range


def squared_distances(u: Tensor, v: Tensor) -> Tensor:
    """``|u_i - v_j|^2`` for u (..., P, d) and v (..., Q, d), clamped at 0 against rounding."""
    return (
        u.square().sum(-1)[..., :, None] + v.square().sum(-1)[..., None, :] - 2 * u @ v.transpose(-1, -2)
    ).clamp_min(0)


class LinearKernel:
    """``k(u, v) = u . v``."""

    shift_invariant = False

    def __call__(self, u: Tensor, v: Tensor) -> Tensor:
        return u @ v.transpose(-1, -2)

    def __repr__(self) -> str:
        return "LinearKernel()"


class GaussianKernel:
    """``k(u, v) = exp(-|u - v|^2 / (2 sigma^2))``; frequencies ``omega ~ N(0, sigma^-2 I)``."""

    shift_invariant = True

    def __init__(self, sigma: float = DEFAULT_SCALE) -> None:
        self.sigma = check_range("sigma", sigma, 0.0, low_open=True)

    def __call__(self, u: Tensor, v: Tensor) -> Tensor:
        return torch.exp(-squared_distances(u, v) / (2 * self.sigma**2))

    def sample_frequencies(self, count: int, dim: int, generator: torch.Generator, dtype=torch.float32) -> Tensor:
        return torch.randn(count, dim, generator=generator, dtype=dtype) / self.sigma

    def __repr__(self) -> str:
        return f"GaussianKernel(sigma={self.sigma:g})"


class IMQKernel:
    """Inverse multiquadric, ``k(u, v) = c / sqrt(c^2 + |u - v|^2)``.

    Its spectral density is a Gaussian scale mixture: ``c / sqrt(c^2 + r^2) =
    E_s[exp(-s r^2)]`` with ``s ~ Gamma(1/2, rate c^2)``, so a frequency is
    ``sqrt(2 s) xi`` with ``xi ~ N(0, I)``. (The official code draws the
    radius from a tabulated Bessel density instead; the two agree.)
    """

    shift_invariant = True

    def __init__(self, c: float = DEFAULT_SCALE) -> None:
        self.c = check_range("c", c, 0.0, low_open=True)

    def __call__(self, u: Tensor, v: Tensor) -> Tensor:
        return self.c / torch.sqrt(self.c**2 + squared_distances(u, v))

    def sample_frequencies(self, count: int, dim: int, generator: torch.Generator, dtype=torch.float32) -> Tensor:
        # Gamma(1/2, rate c^2) is chi-square(1) / (2 c^2): the square of a standard normal over 2 c^2.
        scale = torch.randn(count, 1, generator=generator, dtype=dtype).square() / (2 * self.c**2)
        return torch.sqrt(2 * scale) * torch.randn(count, dim, generator=generator, dtype=dtype)

    def __repr__(self) -> str:
        return f"IMQKernel(c={self.c:g})"


NONLINEAR_KERNELS: dict[str, type[GaussianKernel] | type[IMQKernel]] = dict(
    zip(NONLINEAR_KERNEL_NAMES, (GaussianKernel, IMQKernel), strict=True)
)


class CombinedKernel:
    """The paper's kernel, ``k(u, v) = alpha1 u.v + alpha2 k~(u, v)`` with ``k~`` Gaussian or IMQ (Sec. 5.3).

    ``alpha1 = 0`` is the nonlinear-only ablation, ``alpha2 = 0`` "WPSE Linear"
    (a learned weighted pooling, as limited in rank as CLIP). The defaults,
    ``(0.667, 0.333)`` (:data:`DEFAULT_KERNEL_WEIGHTS`) with a Gaussian of
    sigma 0.5 (:data:`DEFAULT_SCALE`), are the official code's example
    configuration, one of the mixes the paper searched.
    """

    def __init__(
        self,
        alpha1: float = DEFAULT_KERNEL_WEIGHTS[0],
        alpha2: float = DEFAULT_KERNEL_WEIGHTS[1],
        nonlinear: GaussianKernel | IMQKernel | None = None,
    ) -> None:
        self.alpha1 = check_range("alpha1", alpha1, 0.0)
        self.alpha2 = check_range("alpha2", alpha2, 0.0)
        if self.alpha1 == 0 and self.alpha2 == 0:
            raise ValueError("alpha1 and alpha2 must not both be 0")
        self.linear = LinearKernel()
        self.nonlinear = NONLINEAR_KERNELS[DEFAULT_NONLINEAR]() if nonlinear is None else nonlinear

    def __call__(self, u: Tensor, v: Tensor) -> Tensor:
        if not self.alpha1:  # alpha1 and alpha2 are never both 0
            return self.alpha2 * self.nonlinear(u, v)
        linear = self.alpha1 * self.linear(u, v)
        return linear + self.alpha2 * self.nonlinear(u, v) if self.alpha2 else linear

    def __repr__(self) -> str:
        return f"CombinedKernel(alpha1={self.alpha1:g}, alpha2={self.alpha2:g}, nonlinear={self.nonlinear!r})"


def random_fourier_features(points: Tensor, frequencies: Tensor, phases: Tensor) -> Tensor:
    """``z(v) = sqrt(2/D) cos(omega_t . v + b_t)`` for every point (Eq. 9): (..., d) -> (..., D)."""
    count = frequencies.shape[0]
    return math.sqrt(2.0 / count) * torch.cos(points @ frequencies.T + phases)
