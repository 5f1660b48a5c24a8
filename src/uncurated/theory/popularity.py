"""Full-batch popularities (Wang et al. 2025, NUCLR): the risk of Eq. 5 and the convex problem of Eq. 8.

``scores`` is an n x n matrix of similarities ``E_ij = E(x_i, y_j)`` with the
positive pairs on the diagonal. For an approximation ``q_tilde`` of the
popularities ``q_j = sum_j' p(y_j | x_j')``, the multiple-importance-sampling
risk of Eq. 5 is

    L_hat(q_tilde) = -(1/n) sum_i tau log( exp(E_ii / tau) / sum_j exp(E_ij / tau) / q_tilde_j ),

with GCL (full-dataset InfoNCE) as the uniform case ``q_tilde = n c 1``
(Remark 3). NUCLR learns ``q_tilde' = exp(zeta* / tau)`` from the minimiser of

    Phi(zeta) = -(1/n) sum_i tau log( exp(E_ii / tau) / sum_j exp((E_ij - zeta_j) / tau) ) + (1/n) sum_j zeta_j,   (8)

so that ``Phi(zeta) = L_hat(exp(zeta / tau)) + mean(zeta)``. With ``P`` the
row softmax of ``(E_ij - zeta_j) / tau``, the gradient is
``dPhi/dzeta_j = (1 - sum_i P_ij) / n``: it sums to zero (``Phi`` is constant
along ``1_n``, Theorem 2) and vanishes exactly when ``P`` is doubly
stochastic, the fixed point (9).

Everything here is numpy float64 and exact (no minibatches): these are the
reference computations for the toy of :mod:`uncurated.theory.nuclr_toy` and
for checking the stochastic algorithm.
"""

from __future__ import annotations

import numpy as np

from ..validation import check_range


def mis_risk(scores: np.ndarray, q_tilde: np.ndarray, tau: float) -> float:
    """The empirical risk of Eq. 5 for popularities ``q_tilde`` (n positive numbers).

    ``q_tilde = n * c * ones(n)`` gives GCL, the full-dataset InfoNCE minus
    ``tau log(n c)`` (Remark 3). Scaling ``q_tilde`` by ``Z`` adds
    ``tau log(1 / Z)`` (Remark 5).
    """
    tau = check_range("tau", tau, 0.0, low_open=True)
    scores = _check_scores(scores)
    q_tilde = _check_vector("q_tilde", q_tilde, len(scores))
    if not (q_tilde > 0).all():
        raise ValueError(f"q_tilde must be in (0, inf) elementwise, got minimum {q_tilde.min():g}")
    return _mis_risk(scores, np.log(q_tilde), tau)


def popularity_objective(scores: np.ndarray, zeta: np.ndarray, tau: float) -> float:
    """``Phi(zeta)`` of Eq. 8, convex in ``zeta`` and constant along ``ones(n)``."""
    tau = check_range("tau", tau, 0.0, low_open=True)
    scores = _check_scores(scores)
    zeta = _check_vector("zeta", zeta, len(scores))
    return _mis_risk(scores, zeta / tau, tau) + float(zeta.mean())


def popularity_weights(scores: np.ndarray, zeta: np.ndarray, tau: float) -> np.ndarray:
    """The row softmax ``P_ij`` of ``(E_ij - zeta_j) / tau``; rows sum to 1, columns too at the solution of Eq. 8."""
    tau = check_range("tau", tau, 0.0, low_open=True)
    scores = _check_scores(scores)
    zeta = _check_vector("zeta", zeta, len(scores))
    return _row_softmax((scores - zeta) / tau)


def popularity_gradient(scores: np.ndarray, zeta: np.ndarray, tau: float) -> np.ndarray:
    """The gradient of Eq. 8, ``dPhi/dzeta_j = (1 - sum_i P_ij) / n``; its entries sum to 0."""
    weights = popularity_weights(scores, zeta, tau)
    return (1.0 - weights.sum(axis=0)) / len(weights)


def solve_popularity(
    scores: np.ndarray,
    tau: float,
    *,
    zeta0: np.ndarray | None = None,
    tol: float = 1e-12,
    max_iter: int = 10_000,
) -> np.ndarray:
    """Minimise ``Phi`` of Eq. 8 by full-batch gradient descent; return ``zeta*``.

    Starts from ``zeta0`` (default ``zeros(n)``, as in App. G.1) and takes
    steps of ``tau * n / 2`` until the gradient's Euclidean norm is at most
    ``tol``. Near the solution the Hessian is ``(I - P^T P) / (n tau)`` with
    ``P`` doubly stochastic, so this step contracts every direction but
    ``ones(n)`` (along which ``Phi`` is flat) by a factor in ``[1/2, 1]``;
    far from it the step is ``zeta_j += (tau / 2)(sum_i P_ij - 1)``, which
    lowers an entry by at most ``tau / 2``. Since the gradient sums to zero,
    ``mean(zeta*) = mean(zeta0)``: the minimiser is unique up to that constant
    (Theorem 2), and ``exp(zeta* / tau)`` is ``q`` up to a scale.

    Raises ``RuntimeError`` when ``max_iter`` iterations do not reach ``tol``.
    """
    tau = check_range("tau", tau, 0.0, low_open=True)
    tol = check_range("tol", tol, 0.0, low_open=True)
    if isinstance(max_iter, bool) or not isinstance(max_iter, (int, np.integer)):
        raise ValueError(f"max_iter must be an integer, got {max_iter!r}")
    check_range("max_iter", max_iter, 1)
    scores = _check_scores(scores)
    n = len(scores)
    zeta = np.zeros(n) if zeta0 is None else _check_vector("zeta0", zeta0, n).copy()
    step = 0.5 * tau * n
    for _ in range(max_iter):
        gradient = (1.0 - _row_softmax((scores - zeta) / tau).sum(axis=0)) / n
        norm = np.linalg.norm(gradient)
        if norm <= tol:
            return zeta
        zeta -= step * gradient
    raise RuntimeError(
        f"gradient descent on Eq. 8 did not converge: gradient norm {norm:.3g} > tol = {tol:g} "
        f"after max_iter = {max_iter} iterations; raise max_iter or tol"
    )


def _mis_risk(scores: np.ndarray, log_q_tilde: np.ndarray, tau: float) -> float:
    log_partition = _row_logsumexp(scores / tau - log_q_tilde)
    return float(np.mean(tau * log_partition - np.diag(scores)))


def _row_logsumexp(logits: np.ndarray) -> np.ndarray:
    top = logits.max(axis=1, keepdims=True)
    return top[:, 0] + np.log(np.exp(logits - top).sum(axis=1))


def _row_softmax(logits: np.ndarray) -> np.ndarray:
    weights = np.exp(logits - logits.max(axis=1, keepdims=True))
    return weights / weights.sum(axis=1, keepdims=True)


def _check_scores(scores: np.ndarray) -> np.ndarray:
    scores = np.asarray(scores, dtype=np.float64)
    if scores.ndim != 2 or scores.shape[0] != scores.shape[1] or scores.shape[0] < 2:
        raise ValueError(f"scores must be a square (n, n) matrix with n >= 2, got shape {scores.shape}")
    if not np.isfinite(scores).all():
        raise ValueError("scores contains non-finite values (NaN or inf)")
    return scores


def _check_vector(name: str, vector: np.ndarray, n: int) -> np.ndarray:
    vector = np.asarray(vector, dtype=np.float64)
    if vector.shape != (n,):
        raise ValueError(f"{name} must have shape ({n},) (one entry per column of scores), got {vector.shape}")
    if not np.isfinite(vector).all():
        raise ValueError(f"{name} contains non-finite values (NaN or inf)")
    return vector
