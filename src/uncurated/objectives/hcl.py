"""Hard negative contrastive loss (HCL): importance-weighted negatives."""

from __future__ import annotations

import math

from torch import Tensor

from ..validation import check_integer, check_range
from .dcl import DCL, debiased_rows
from .row_statistics import RowStatistics
from .schedules import anneal_beta


def hcl_rows(scores: RowStatistics, beta: float, tau_plus: float, clamp: str = "min", at_floor=None) -> Tensor:
    """Per-anchor HCL: DCL with the importance-weighted means ``log sum w e^s = L(beta+1) - L(beta)``."""
    positive = scores.positive_logit()
    log_negative_mean = scores.negative_logsumexp(beta + 1.0) - scores.negative_logsumexp(beta)
    if scores.positive_views == 1:  # the one view's weight cancels
        log_positive_mean = positive
    else:
        log_positive_mean = scores.positive_logsumexp(beta + 1.0) - scores.positive_logsumexp(beta)
    return debiased_rows(scores, positive, log_negative_mean, log_positive_mean, tau_plus, clamp, at_floor)


class HCL(DCL):
    r"""Hard negative contrastive loss (Robinson, Chuang et al. 2021; thesis ch. 4, eq. 4.4).

    Negatives are reweighted towards those the embedding finds similar to
    the anchor, :math:`q_\beta(x^-) \propto e^{\beta s^-} p(x^-)`, with
    self-normalized importance weights :math:`w_j = e^{\beta s_j^-} / \sum_k
    e^{\beta s_k^-}` (computed as log-sum-exps, so large ``beta`` is stable),
    and debiased as in DCL:

    .. math::

        g = \max\Big\{\frac{1}{1-\tau^+}\Big(\sum_j w_j e^{s_j^-}
            - \tau^+ \sum_m w^+_m e^{s_m^+}\Big),\ e^{-1/t}\Big\},\qquad
        \ell = -\log\frac{e^{s^+}}{e^{s^+} + N g}

    ``beta=0`` is DCL; ``beta=0, tau_plus=0`` is InfoNCE; as ``beta`` grows the
    weighted term tends to the hardest negative (thesis Prop. 4.3). With one
    positive view (the default) its weight cancels. The thesis restates no
    clamp for HCL; the reference code clamps as DCL does, and so does this
    one (``clamp`` as in :class:`DCL`, with the same ``clamped_fraction``
    diagnostic).

    ``beta_changes`` anneals ``beta`` towards 0 in that many equal steps over
    ``epochs`` epochs (:func:`uncurated.objectives.schedules.anneal_beta`,
    thesis App. A.2.2), following :meth:`set_epoch`; ``None`` keeps it fixed.

    Defaults from the thesis's SimCLR experiments: two views, t = 0.5,
    ``beta`` = 1, :math:`\tau^+` = 0.1.

    Example::

        loss = HCL(beta=0.5, tau_plus=0.1)
        value = loss(z1, z2)
    """

    name = "hcl"
    papers = ("robinson2021hcl", "chuang2023thesis")

    def __init__(
        self,
        beta: float = 1.0,
        tau_plus: float = 0.1,
        *,
        clamp: str = "min",
        beta_changes: int | None = None,
        epochs: int | None = None,
        **common,
    ) -> None:
        check_range("beta", beta, 0.0)
        if beta_changes is not None:
            check_integer("beta_changes", beta_changes, 1)
            if epochs is None:
                raise ValueError("beta_changes needs epochs (the annealing spreads its steps over them)")
            check_integer("epochs", epochs, 1)
        super().__init__(tau_plus, clamp=clamp, **common)
        self.beta_initial = self.beta = float(beta)
        self.beta_changes, self.epochs = beta_changes, epochs

    def set_epoch(self, epoch: float) -> None:
        """As :meth:`Objective.set_epoch`; with ``beta_changes``, beta follows the annealing."""
        super().set_epoch(epoch)
        if self.beta_changes is not None:
            assert self.epochs is not None  # the constructor refuses beta_changes without epochs
            whole = min(math.floor(epoch), self.epochs - 1)
            self.beta = anneal_beta(self.beta_initial, whole, self.epochs, self.beta_changes)

    def row_loss(self, scores: RowStatistics) -> Tensor:
        return hcl_rows(scores, self.beta, self.tau_plus, self.clamp, self.floor_recorder(scores))

    def extra_repr(self) -> str:
        return f"beta={self.beta}, {super().extra_repr()}"
