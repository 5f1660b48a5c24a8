"""Hyperparameter schedules from the thesis: HCL's beta annealing and RINCE's q warm-up."""

from __future__ import annotations

import math

from ..validation import check_range


def anneal_beta(beta: float, epoch: int, epochs: int, changes: int) -> float:
    r"""HCL's annealed concentration at ``epoch`` (thesis App. A.2.2).

    Starting from :math:`\beta_1 = \beta`, every ``epochs / changes`` epochs the
    concentration drops by :math:`\beta / \ell` (:math:`\ell` = ``changes``):
    :math:`\beta_{i+1} = \beta_i - \beta/\ell`, the switch to :math:`\beta_{i+1}`
    happening at epoch :math:`i \cdot e / \ell`. So ``beta`` falls towards 0 in
    ``changes`` equal steps. (The reference code's ``linspace(beta, 0, 9)``
    reaches 0 in its last ninth instead.)
    """
    check_range("beta", beta, 0.0)
    if epochs < 1 or changes < 1:
        raise ValueError(f"epochs and changes must be >= 1, got epochs={epochs}, changes={changes}")
    check_range("epoch", epoch, 0, epochs - 1)
    steps_taken = math.floor(epoch * changes / epochs)
    return beta * (1.0 - steps_taken / changes)


def warmup_q(step: float, total_steps: float, start: float = 0.01, end: float = 0.4) -> float:
    """RINCE's q, warmed up linearly from ``start`` to ``end`` over ``total_steps`` (thesis Sec. 5.3, video).

    Held at ``end`` after ``total_steps``.
    """
    if total_steps < 1:
        raise ValueError(f"total_steps must be >= 1, got {total_steps}")
    check_range("step", step, 0)
    check_range("start", start, 0.0, 1.0, low_open=True)
    check_range("end", end, 0.0, 1.0, low_open=True)
    fraction = min(step / total_steps, 1.0)
    return start + (end - start) * fraction
