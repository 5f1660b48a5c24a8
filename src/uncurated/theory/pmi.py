"""Pointwise mutual information and the population symmetric InfoNCE on a discrete joint (Uesaka et al. 2025, Sec. 4).

For discrete ``X`` and ``Y`` with joint table ``P`` (``P[i, j] = p(x_i, y_j)``)
and a similarity table ``G`` (``G[i, j] = g(x_i, y_j)``, temperature included),
the population form of CLIP's symmetric InfoNCE is

    L_NCE(G) = 1/2 E_p[-G(x, y) + ln E_{p(x')} exp G(x', y)]
             + 1/2 E_p[-G(x, y) + ln E_{p(y')} exp G(x, y')]              (Eq. 2)

(the text-to-image and the image-to-text term of Eq. 1 as N -> infinity, less
``ln N``). Proposition 4.1: ``-L_NCE(G) <= I(X; Y)`` for every ``G``, with
equality exactly when ``G`` is the pointwise mutual information
``PMI(x, y) = ln p(x, y) / (p(x) p(y))`` plus a constant. So
``L_NCE(G) + I(X; Y) >= 0`` measures how far a similarity is from PMI.

Proposition C.1: an inner-product similarity of ``d``-dimensional embeddings,
shifted by any constant, has rank at most ``d + 1``, so it cannot equal a PMI
table of larger rank (:func:`inner_product_rank`).

Unlike the numpy tools of :mod:`uncurated.theory`, these are torch float64
functions: :func:`population_loss` is differentiable in ``G`` and trains the
lookup tables of :mod:`uncurated.theory.wpse_toy`. Pairs with
``p(x, y) = 0`` contribute nothing to an expectation (``0 ln 0 = 0``), so
``G`` may be ``-inf`` there, as :func:`pmi` returns.
"""

from __future__ import annotations

import math

import torch
from torch import Tensor

from ..validation import check_range

#: How far from 1 the entries of a joint table may sum (float32 tables round to about 1e-7).
SUM_TOLERANCE = 1e-6


def pmi(P: Tensor) -> Tensor:
    """The (N_x, N_y) table ``ln p(x, y) / (p(x) p(y))``, ``-inf`` where ``p(x, y) = 0``."""
    P = _check_joint(P)
    log_px, log_py = _log_marginals(P)
    return torch.where(P > 0, P.log() - log_px[:, None] - log_py[None, :], -math.inf)


def mutual_information(P: Tensor) -> Tensor:
    """``I(X; Y) = E_p[PMI(x, y)]`` in nats, a float64 scalar tensor (0 exactly when ``P = p_X p_Y^T``)."""
    P = _check_joint(P)
    return _expectation(P, pmi(P))


def population_loss(G: Tensor, P: Tensor) -> Tensor:
    """The population symmetric InfoNCE ``L_NCE(G)`` of Eq. 2 under the joint ``P``, a float64 scalar tensor.

    ``G`` is the (N_x, N_y) table of logits (similarity over temperature); the
    inner expectations are log-sum-exps with the log-marginals, so large
    logits do not overflow. Differentiable in ``G``. At ``G = pmi(P) + c`` it
    equals ``-mutual_information(P)`` (Proposition 4.1); any other ``G`` gives
    more.
    """
    P = _check_joint(P)
    G = _check_logits(G, P.shape)
    P = P.to(G.device)
    log_px, log_py = _log_marginals(P)
    log_mean_over_x = torch.logsumexp(G + log_px[:, None], dim=0)  # ln E_{x'} exp G(x', y), one per y
    log_mean_over_y = torch.logsumexp(G + log_py[None, :], dim=1)  # ln E_{y'} exp G(x, y'), one per x
    text_to_image = _expectation(P, log_mean_over_x[None, :] - G)
    image_to_text = _expectation(P, log_mean_over_y[:, None] - G)
    return 0.5 * (text_to_image + image_to_text)


def inner_product_rank(A: Tensor, B: Tensor, c: float = 0.0) -> int:
    """The numerical rank of ``A^T B - c J`` for A (d, M_A), B (d, M_B) and J all ones (Proposition C.1).

    Proposition C.1 bounds it by ``d + 1`` for every ``c``: the matrix is
    ``[A; -1]^T [B; c]``, a product through ``d + 1`` dimensions. So the
    logits ``theta u_i . v_j`` of CLIP with d-dimensional embeddings, shifted
    by any constant, cannot fit a PMI table of rank above ``d + 1``. The rank
    is :func:`torch.linalg.matrix_rank`'s (singular values above
    ``max(M_A, M_B) eps`` times the largest), in float64.
    """
    c = check_range("c", c, -math.inf, math.inf, low_open=True, high_open=True)
    A, B = _check_embeddings("A", A), _check_embeddings("B", B)
    if A.shape[0] != B.shape[0]:
        raise ValueError(
            f"A and B must have the same number of rows d, got shapes {tuple(A.shape)} and {tuple(B.shape)}"
        )
    return int(torch.linalg.matrix_rank(A.T @ B.to(A.device) - c))


def _expectation(P: Tensor, values: Tensor) -> Tensor:
    """``sum P * values`` over the support of ``P``, so that values outside it (``inf``, ``nan``) do not count."""
    return torch.where(P > 0, P * values, 0.0).sum()


def _log_marginals(P: Tensor) -> tuple[Tensor, Tensor]:
    return P.sum(dim=1).log(), P.sum(dim=0).log()


def _check_joint(P: Tensor) -> Tensor:
    """``P`` as a float64 tensor, after checking that it is an (N_x, N_y) table of probabilities."""
    P = torch.as_tensor(P).detach().to(torch.float64)
    if P.ndim != 2 or P.numel() == 0:
        raise ValueError(f"P must be an (N_x, N_y) table of probabilities p(x, y), got shape {tuple(P.shape)}")
    if not bool(torch.isfinite(P).all()):
        raise ValueError("P contains non-finite values (NaN or inf)")
    smallest = float(P.min())
    if smallest < 0:
        raise ValueError(f"P must have entries in [0, 1], got an entry of {smallest:g}")
    total = float(P.sum())
    if abs(total - 1) > SUM_TOLERANCE:
        raise ValueError(f"P must sum to 1 (within {SUM_TOLERANCE:g}), got a sum of {total:.9g}")
    return P


def _check_logits(G: Tensor, shape: torch.Size) -> Tensor:
    if not isinstance(G, Tensor) or not G.is_floating_point():
        raise ValueError(f"G must be a floating-point tensor of shape {tuple(shape)}, got {G!r:.80}")
    if G.shape != shape:
        raise ValueError(f"G must have the shape of P, {tuple(shape)}, got {tuple(G.shape)}")
    if bool(torch.isnan(G).any() | (G == math.inf).any()):
        raise ValueError("G must not contain NaN or +inf (-inf is allowed where p(x, y) = 0)")
    return G.to(torch.float64)


def _check_embeddings(name: str, value: Tensor) -> Tensor:
    if not isinstance(value, Tensor) or value.ndim != 2 or not value.is_floating_point():
        raise ValueError(f"{name} must be a floating-point (d, M) tensor, one embedding per column, got {value!r:.80}")
    if not bool(torch.isfinite(value).all()):
        raise ValueError(f"{name} contains non-finite values (NaN or inf)")
    return value.detach().to(torch.float64)
