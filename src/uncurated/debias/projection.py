"""Closed-form debiasing of text embeddings (thesis Ch. 7, Section 7.2).

All functions take embeddings as rows, shape ``(n, d)``, and return ``(d, d)``
matrices ``P`` meant to act on column vectors, ``z -> P z``; :func:`project`
applies one to rows as ``x @ P.T``. Nothing is inverted explicitly: ``P0``
comes from a QR basis of the spurious directions and the calibration solves a
Cholesky-factored system. The computations keep the input dtype, so pass
float64 embeddings where the last digits matter.

- :func:`orthogonal_projection`: ``P0 = I - A (A^T A)^{-1} A^T``.
- :func:`calibrated_projection`: Lemma 7.1's minimizer of the calibration loss
  (eq. 7.3), ``P* = P0 (I + lambda/|S| sum (z_i - z_j)(z_i - z_j)^T)^{-1}``.
- :func:`calibration_matrix` and :func:`calibrated_projection_svd`: the same
  through the SVD of the pair differences.
- :func:`equalize`: Lemma 7.2's minimizer of the equalization loss (eq. 7.4),
  used without ``P0`` for generative models.
"""

from __future__ import annotations

import torch
import torch.nn.functional as F
from torch import Tensor

from ..validation import check_range

__all__ = [
    "calibrated_projection",
    "calibrated_projection_svd",
    "calibration_matrix",
    "equalize",
    "orthogonal_projection",
    "project",
]

DISCRIMINATIVE_LAMBDA = 1000.0
"""The thesis's lambda for zero-shot classification and retrieval (Section 7.3)."""

GENERATIVE_LAMBDA = 500.0
"""The thesis's lambda for text-to-image generation (Section 7.5)."""


def _check_matrix(name: str, x: Tensor, shape: str) -> None:
    if not isinstance(x, Tensor) or x.ndim != 2:
        got = tuple(x.shape) if isinstance(x, Tensor) else type(x).__name__
        raise ValueError(f"{name} must be a 2-D tensor of shape {shape}, got {got}")
    if not x.is_floating_point():
        raise ValueError(f"{name} must be a floating-point tensor, got dtype {x.dtype}")
    if not bool(torch.isfinite(x).all()):
        raise ValueError(f"{name} contains non-finite values (NaN or inf)")


def _check_projection(P: Tensor) -> int:
    _check_matrix("P", P, "(dim, dim)")
    if P.shape[0] != P.shape[1]:
        raise ValueError(f"P must be square (dim, dim), got shape {tuple(P.shape)}")
    return P.shape[0]


def _pair_differences(z_i: Tensor, z_j: Tensor, dim: int | None = None) -> Tensor:
    """Return the rows ``z_i - z_j``, shape ``(|S|, d)``, after checking the pair set."""
    _check_matrix("z_i", z_i, "(pairs, dim)")
    _check_matrix("z_j", z_j, "(pairs, dim)")
    if z_i.shape != z_j.shape:
        raise ValueError(
            f"z_i and z_j must have the same shape (pairs, dim), got {tuple(z_i.shape)} and {tuple(z_j.shape)}"
        )
    if z_i.shape[0] == 0:
        raise ValueError("the pair set S is empty: z_i and z_j must have at least one row")
    if dim is not None and z_i.shape[1] != dim:
        raise ValueError(f"z_i and z_j must have dim {dim} (the size of P0), got {z_i.shape[1]}")
    return z_i - z_j


def _calibration_system(differences: Tensor, lam: float) -> Tensor:
    """Cholesky factor of ``G = I + lambda/|S| Z_diff Z_diff^T``, symmetric positive definite."""
    scale = lam / differences.shape[0]
    eye = torch.eye(differences.shape[1], dtype=differences.dtype, device=differences.device)
    return torch.linalg.cholesky(eye + scale * differences.T @ differences)


def orthogonal_projection(A: Tensor) -> Tensor:
    """Projection onto the orthogonal complement of the spurious directions (Section 7.2).

    ``A`` has shape ``(d, m)``: its columns are the embeddings of the ``m``
    spurious prompts (stack row embeddings with ``.T``). Returns
    ``P0 = I - A (A^T A)^{-1} A^T``, computed as ``I - Q Q^T`` from a reduced QR
    factorization ``A = Q R``, which equals it whenever ``A`` has full column
    rank. ``P0`` is symmetric, idempotent and annihilates ``A``.

    Raises ``ValueError`` if ``A`` is rank-deficient (numerical rank below
    ``m``, which includes ``m > d``): ``A^T A`` is then singular and the
    projection in the thesis is undefined; drop the redundant prompts.
    """
    _check_matrix("A", A, "(dim, prompts)")
    d, m = A.shape
    if m == 0:
        raise ValueError("A must have at least one column (one spurious prompt embedding), got 0")
    rank = int(torch.linalg.matrix_rank(A))
    if rank < m:
        raise ValueError(
            f"A must have full column rank {m} (linearly independent spurious prompt embeddings), "
            f"got numerical rank {rank} for shape ({d}, {m})"
        )
    Q, _ = torch.linalg.qr(A, mode="reduced")
    return torch.eye(d, dtype=A.dtype, device=A.device) - Q @ Q.T


def calibrated_projection(P0: Tensor, z_i: Tensor, z_j: Tensor, lam: float = DISCRIMINATIVE_LAMBDA) -> Tensor:
    """The calibrated projection of Lemma 7.1.

    ``P* = P0 (I + lambda/|S| sum_{(i,j) in S} (z_i - z_j)(z_i - z_j)^T)^{-1}``
    minimizes the calibration loss (eq. 7.3)
    ``||P - P0||^2 + lambda/|S| sum_{(i,j) in S} ||P z_i - P z_j||^2``.

    ``P0`` is ``(d, d)`` (:func:`orthogonal_projection`, or the identity for
    calibration only); ``z_i`` and ``z_j`` are ``(|S|, d)``: row ``k`` of each
    is the embedding of one prompt of the ``k``-th pair, prompts with the same
    class and different spurious attributes. ``lam >= 0``; the thesis uses
    1000 for classification. Computed as ``(G^{-1} P0^T)^T`` with a Cholesky
    solve, ``G`` being symmetric positive definite.
    """
    dim = _check_projection(P0)
    differences = _pair_differences(z_i, z_j, dim)
    lam = check_range("lam", lam, 0.0)
    factor = _calibration_system(differences.to(P0.dtype), lam)
    return torch.cholesky_solve(P0.T, factor).T


def calibration_matrix(z_i: Tensor, z_j: Tensor, lam: float = DISCRIMINATIVE_LAMBDA) -> Tensor:
    """The calibration matrix ``U (I + lambda' Sigma^2)^{-1} U^T + (I - U U^T)`` (Lemma 7.1, SVD view).

    ``Z_diff = U Sigma V^T`` is the thin SVD of the ``(d, |S|)`` matrix whose
    columns are ``z_i - z_j``, restricted to its nonzero singular values, and
    ``lambda' = lambda / |S|``. The matrix shrinks each direction of variation
    under an attribute change by ``1 / (1 + lambda' sigma^2)`` and leaves the
    directions no pair moves along, ``I - U U^T``, unchanged (that term is zero
    when the differences span the space). It equals
    ``(I + lambda/|S| Z_diff Z_diff^T)^{-1}`` and is evaluated as
    ``I - U diag(lambda' sigma^2 / (1 + lambda' sigma^2)) U^T``.
    """
    differences = _pair_differences(z_i, z_j)
    lam = check_range("lam", lam, 0.0)
    U, sigma, _ = torch.linalg.svd(differences.T, full_matrices=False)
    tolerance = max(differences.shape) * torch.finfo(differences.dtype).eps * sigma.max()
    keep = sigma > tolerance
    U, sigma = U[:, keep], sigma[keep]
    scaled = (lam / differences.shape[0]) * sigma**2
    shrink = scaled / (1.0 + scaled)
    eye = torch.eye(differences.shape[1], dtype=differences.dtype, device=differences.device)
    return eye - (U * shrink) @ U.T


def calibrated_projection_svd(P0: Tensor, z_i: Tensor, z_j: Tensor, lam: float = DISCRIMINATIVE_LAMBDA) -> Tensor:
    """Lemma 7.1 in its SVD form, ``P* = P0 C`` with ``C`` from :func:`calibration_matrix`.

    Equal to :func:`calibrated_projection`; it exposes the per-direction
    shrinkage and serves as an independent check of the closed form.
    """
    dim = _check_projection(P0)
    _pair_differences(z_i, z_j, dim)
    return P0 @ calibration_matrix(z_i.to(P0.dtype), z_j.to(P0.dtype), lam)


def equalize(z0: Tensor, z_i: Tensor, z_j: Tensor, lam: float = GENERATIVE_LAMBDA) -> Tensor:
    """Equalized prompt embeddings, the minimizer of eq. 7.4 (Lemma 7.2).

    ``z* = (I + lambda/|S| sum_{(i,j) in S} (z_i - z_j)(z_i - z_j)^T)^{-1} z0``
    minimizes ``||z - z0||^2 + lambda/|S| sum (z^T z_i - z^T z_j)^2``: it moves
    the target embedding ``z0`` until it scores the two prompts of each pair
    alike, balancing the attribute rather than removing it. Lemma 7.2 also
    gives ``P0 z* = P* z0``. This is the variant used for generative models,
    without ``P0`` and with ``lambda = 500`` (Section 7.5).

    ``z0`` is one embedding ``(d,)`` or a batch of rows ``(n, d)``; the result
    has the same shape and is not re-normalized.
    """
    if not isinstance(z0, Tensor) or z0.ndim not in (1, 2):
        got = tuple(z0.shape) if isinstance(z0, Tensor) else type(z0).__name__
        raise ValueError(f"z0 must be a tensor of shape (dim,) or (n, dim), got {got}")
    rows = z0.reshape(-1, z0.shape[-1])
    _check_matrix("z0", rows, "(dim,) or (n, dim)")
    differences = _pair_differences(z_i, z_j, z0.shape[-1])
    lam = check_range("lam", lam, 0.0)
    factor = _calibration_system(differences.to(z0.dtype), lam)
    return torch.cholesky_solve(rows.T, factor).T.reshape(z0.shape)


def project(embeddings: Tensor, P: Tensor, renormalize: bool = True) -> Tensor:
    """Apply ``P`` to row embeddings, ``embeddings @ P.T``, then L2-normalize the rows.

    This is how debiased zero-shot weights and queries are formed (Section 7.2;
    the reference code re-normalizes after projecting). A row that ``P``
    annihilates, such as a spurious prompt itself under ``P0``, stays zero
    after re-normalization.
    """
    dim = _check_projection(P)
    if not isinstance(embeddings, Tensor) or embeddings.ndim != 2 or embeddings.shape[1] != dim:
        got = tuple(embeddings.shape) if isinstance(embeddings, Tensor) else type(embeddings).__name__
        raise ValueError(f"embeddings must have shape (n, {dim}) to match P, got {got}")
    projected = embeddings @ P.T.to(embeddings.dtype)
    return F.normalize(projected, dim=1) if renormalize else projected
