"""NUCLR: the global contrastive loss with learned per-sample popularities (Wang et al. 2025)."""

from __future__ import annotations

import math
from collections.abc import Mapping
from functools import partial

import torch
from torch import Tensor

from ..validation import check_choice, check_range
from .sogclr import log_denominator, weighted_surrogate
from .stateful import ColumnPass, Direction, DirectionResult, Segments, StatefulObjective, Updates, log_moving_average

ZETA_UPDATES = ("ema", "heavy_ball")
ZETA_SCHEDULES = ("cosine", "authors")
XI_RULES = ("paper", "authors", "running")
#: The share of the run for which zeta stays at ``zeta_init``: Wang et al. 2025 freeze it for the first 5 of 30 epochs.
FREEZE_FRACTION = 5 / 30


def run_freeze_epochs(epochs: float | None, freeze_fraction: float = FREEZE_FRACTION) -> float:
    """The epochs zeta stays frozen in a run of ``epochs``: ``freeze_fraction`` of it (none without a length)."""
    return 0.0 if epochs is None else freeze_fraction * epochs


def log_phi(direction: Direction) -> Tensor:
    r"""(R,) :math:`\log \varphi_i`: the batch's offset negatives relative to the positive, rescaled (Eq. 12).

    :math:`\varphi_i = \frac{P}{N}\sum_{j \in N(i)} e^{S_{ij} - \zeta_j/t - s_i}` with ``P`` the
    anchor's negatives in the dataset and ``N`` in the batch (``(n-1)/(B-1)``
    across modalities): unbiased for the sum over the dataset.
    """
    scores = direction.scores
    log_rescale = math.log(direction.pool) - math.log(scores.negative_slots)
    return scores.negative_logsumexp() - scores.positive_logit() + log_rescale


class NUCLR(StatefulObjective):
    r"""NUCLR (Wang et al. 2025, ICLR; Algorithm 1, Eqs. 10-15).

    Mini-batch InfoNCE estimates each anchor's partition function with a
    uniform proposal, an error that does not shrink with more data. NUCLR
    learns a popularity :math:`\zeta_j` per contrast sample and weighs it out
    of the partition sum, alternating one step on each of

    .. math::

        \Phi(\zeta) = \frac1n\sum_i t \log\big(\varepsilon(\zeta_i) + \varphi_i(w, \zeta)\big)
            + \frac1n\sum_j \zeta_j \quad (10),\qquad
        \Psi(w) = \frac1n\sum_i t \log\big(\varepsilon(\zeta_i) + \varphi_i(w, \zeta)\big) \quad (11)

    with :math:`\varepsilon(\zeta_i) = e^{-\zeta_i/t}` and
    :math:`\varphi_i = \sum_{j\ne i} e^{(s_{ij} - s_{ii} - \zeta_j)/t}`, estimated on a
    batch with the unbiased rescaling :math:`\frac{n-1}{B-1}` (Eq. 12). As in
    SogCLR a moving average :math:`u_i` of :math:`\varphi_i` enters the
    denominators. The model gradient is Eq. 15 with the :math:`\xi` trick
    (the positive's :math:`\varepsilon(\zeta_i)` replaced by :math:`e^{-\xi/t}`);
    the popularity gradient is Eq. 14,

    .. math::

        G(\zeta_j) = \frac1n - \frac1B\Big[\frac{\varepsilon_j}{\varepsilon_j + u_j}
            + \frac{n-1}{B-1}\sum_{i \ne j} \frac{e^{(s_{ij} - s_{ii} - \zeta_j)/t}}{\varepsilon_i + u_i}\Big]
            \quad (14)

    applied after ``freeze_epochs`` epochs (unset: ``freeze_fraction`` of ``epochs``, the paper's 5 of 30; none
    without ``epochs``; a freeze as long as the run is refused, zeta would never move). A popular sample (large
    :math:`\zeta_j`, a likely false negative) is pushed away less:
    :math:`\zeta_j` acts as a learned negative margin.

    **The zeta step** (``zeta_update``). The paper says "SGD with momentum"
    without its form. ``"ema"`` (the default) is the authors' script
    (``models/losses.py``, ``--theta 0.9``): ``m <- (1 - theta) m + theta G``
    (``m = G`` at a sample's first visit), ``zeta <- zeta - lr m``, a moving
    average that puts ``zeta_theta = 0.9`` on the new gradient. It is the
    default because it is the update that produced the paper's tables.
    ``"heavy_ball"`` is ``m <- zeta_momentum m + G``, the form this project
    used before: at a steady gradient its step is ``lr / (1 - zeta_momentum)``,
    10x ``zeta_lr`` at 0.9.

    **The zeta step size** (``zeta_lr``, ``zeta_schedule``, ``zeta_lr_ratio_a``).
    Constant without ``epochs``; with it, ``"cosine"`` (the paper) decays
    from ``zeta_lr`` to 0 between ``freeze_epochs`` and ``epochs``, and
    ``"authors"`` is the authors' per-epoch schedule: the cosine over the
    whole epochs ``e`` (``0.5 lr (1 + cos(pi (e - freeze) / (epochs - 1 - freeze)))``)
    divided by 10 from epoch ``epochs // 2`` and by 100 from ``3 epochs // 4``.
    ``zeta_lr_ratio_a`` scales the step of side ``a``'s popularities (the
    first argument, the images): the authors use 0.1 (``eta_I_ratio``).

    **The zeta gradient** is the paper's Eq. 14, which is the gradient of
    Eq. 10. The authors' code computes a different one: it drops the
    :math:`\frac{n-1}{B-1}` rescaling of the off-diagonal terms and multiplies
    the whole by ``n``, i.e. ``G_authors = 1 - (n/B) [own + sum_{i != j} ...]``.
    So the constant and own terms of their step are ``n`` times ours: their
    step ``eta`` corresponds to ``zeta_lr = n * eta`` (5e-6 at CC3M's
    n = 2.7M is ``zeta_lr`` of about 13.5), while their off-diagonal terms
    weigh :math:`\frac{B-1}{n-1}` as much as the paper's (1/5,300 at CC3M with
    B = 512): no step size converts one update into the other exactly.

    **xi** (``xi_rule``). The ξ trick needs :math:`\xi \ge \zeta_i`, so
    :math:`\xi_0 \ge \zeta_0` is required (``xi_init < zeta_init`` is refused
    when ``xi_trick`` is on). ``"paper"`` (the default, Algorithm 1 line 7):
    :math:`\xi \leftarrow \max(\xi, \|\zeta\|_\infty)` after every training
    call, over the whole side (the absolute value: with ``zeta_init = -0.05``
    it makes ξ 0.05 from the first step; computed from the call's new
    popularities, which gives the maximum over the side since ξ covered every
    earlier value, at O(B) per call); the default because it is the algorithm
    as published, monotone and independent of epochs.
    ``"authors"``: at each epoch boundary (seen by :meth:`set_epoch`)
    :math:`\xi = \max(\xi_0, \max_j \zeta_j)`, which can go down.
    ``"running"`` (this project's former rule): a running maximum of
    :math:`\max_j \zeta_j` over the updated samples, at every update. Each
    side (``a``, ``b``) keeps its own ξ.

    **When the state is written.** The popularity gradient sums over the
    anchors with row weights from the same step, a pass over the score
    matrix of its own. Tiled, with features that need a gradient, it is
    accumulated in the backward pass instead, and the call's whole update
    is written when that pass runs (see
    :class:`~uncurated.objectives.stateful.StatefulObjective`).

    With ``learn_zeta=False`` and ``zeta_init=0, xi_init=0`` it is SogCLR on
    the sum-scale :math:`\varphi` (``SogCLR(eps="nuclr")``). Ablation switches
    of the paper: ``learn_zeta=False`` (†), ``xi_trick=False`` (◇),
    ``freeze_epochs=0`` (•).

    Defaults, Wang et al. 2025 and the authors' CC3M script: zeta_init = -0.05,
    xi_init = 0, gamma = 0.8, zeta frozen for the first sixth of the run (their 5 of 30 epochs),
    zeta_theta = 0.9. Not theirs:
    ``zeta_lr = 1.0`` (a choice of this project, for Eq. 14's scale; it keeps
    the steady-state step of the former default, 0.1 with heavy-ball
    momentum 0.9) and t = 0.07 (the paper tunes t in {0.01, 0.03, 0.05, 0.07};
    the authors' script uses 0.01).

    Example::

        loss = NUCLR(num_samples=len(dataset), epochs=30)
        for epoch in range(30):
            loss.set_epoch(epoch)
            for images, texts, index in loader:
                loss.begin_step()
                value = loss(model.image(images), model.text(texts), index=index)
    """

    name = "nuclr"
    papers = ("wang2025nuclr",)

    def __init__(
        self,
        num_samples: int | tuple[int, int],
        *,
        temperature: float = 0.07,
        zeta_init: float = -0.05,
        xi_init: float = 0.0,
        zeta_lr: float = 1.0,
        zeta_update: str = "ema",
        zeta_theta: float = 0.9,
        zeta_momentum: float = 0.9,
        zeta_schedule: str = "cosine",
        zeta_lr_ratio_a: float = 1.0,
        freeze_epochs: float | None = None,
        freeze_fraction: float = FREEZE_FRACTION,
        epochs: float | None = None,
        learn_zeta: bool = True,
        xi_trick: bool = True,
        xi_rule: str = "paper",
        **options,
    ) -> None:
        check_range("zeta_init", zeta_init)
        check_range("xi_init", xi_init)
        if xi_trick and xi_init < zeta_init:
            raise ValueError(
                f"xi_init must be >= zeta_init = {zeta_init} (the xi trick needs xi >= every zeta; Wang et al. 2025, "
                f"Algorithm 1 sets xi_0 >= zeta_0), got {xi_init}: raise xi_init or set xi_trick=False"
            )
        self.zeta_init, self.xi_init = float(zeta_init), float(xi_init)
        super().__init__(num_samples, temperature=temperature, **options)
        self.zeta_lr = check_range("zeta_lr", zeta_lr, 0.0)
        self.zeta_update = check_choice("zeta_update", zeta_update, ZETA_UPDATES)
        self.zeta_theta = check_range("zeta_theta", zeta_theta, 0.0, 1.0, low_open=True)
        self.zeta_momentum = check_range("zeta_momentum", zeta_momentum, 0.0, 1.0, high_open=True)
        self.zeta_schedule = check_choice("zeta_schedule", zeta_schedule, ZETA_SCHEDULES)
        self.zeta_lr_ratio_a = check_range("zeta_lr_ratio_a", zeta_lr_ratio_a, 0.0)
        self.freeze_fraction = check_range("freeze_fraction", freeze_fraction, 0.0, 1.0, high_open=True)
        if epochs is not None:
            check_range("epochs", epochs, 0.0, low_open=True)
        if freeze_epochs is None:
            freeze_epochs = run_freeze_epochs(epochs, self.freeze_fraction)
        self.freeze_epochs = check_range("freeze_epochs", freeze_epochs, 0.0)
        if epochs is not None and self.freeze_epochs >= epochs:
            raise ValueError(
                f"freeze_epochs must be below epochs = {epochs} (zeta would never move), got {self.freeze_epochs}: "
                "lower freeze_epochs, or leave it unset for freeze_fraction of the run"
            )
        if epochs is None and zeta_schedule == "authors":
            raise ValueError("zeta_schedule='authors' needs epochs (its steps fall at epochs / 2 and 3 epochs / 4)")
        self.epochs = epochs
        self.learn_zeta = bool(learn_zeta)
        self.xi_trick = bool(xi_trick)
        self.xi_rule = check_choice("xi_rule", xi_rule, XI_RULES)
        self._xi_vector: Tensor | None = None
        """Both sides' xi as the last :meth:`after_update` computed them, on the device; ``state.scalars`` holds its
        elements (``_xi_views``) until something else sets them (a load, an undo, the authors' rule)."""
        self._xi_views: tuple[Tensor, ...] = ()

    @classmethod
    def run_length_parameters(cls, epochs: float, params: Mapping[str, object]) -> dict[str, object]:
        """``params`` with the run's ``epochs`` and the freeze they give (:func:`run_freeze_epochs`) where unset:
        what a training configuration records, so that a resumed run keeps the freeze it started with."""
        resolved = {"epochs": epochs, **params}
        fraction = resolved.get("freeze_fraction", FREEZE_FRACTION)
        length = resolved["epochs"]
        if "freeze_epochs" not in resolved and isinstance(fraction, int | float) and isinstance(length, int | float):
            resolved["freeze_epochs"] = run_freeze_epochs(float(length), float(fraction))
        return resolved

    def state_fields(self) -> dict[str, float]:
        return {"log_u": -math.inf, "zeta": self.zeta_init, "zeta_momentum": 0.0}

    def state_scalars(self) -> dict[str, float]:
        return {"xi_a": self.xi_init, "xi_b": self.xi_init}

    def side_scores(self, state: dict[str, Tensor], temperature: float) -> tuple[float, Tensor]:
        return 1.0 / temperature, state["zeta"] / temperature

    def needs_epoch(self) -> bool:
        return (
            super().needs_epoch()
            or (self.learn_zeta and (self.freeze_epochs > 0 or self.epochs is not None))
            or (self.xi_trick and self.xi_rule == "authors")
        )

    def set_epoch(self, epoch: float) -> None:
        """As :meth:`StatefulObjective.set_epoch`; with ``xi_rule="authors"`` a new whole epoch resets xi."""
        previous = self.epoch
        super().set_epoch(epoch)
        if self.xi_rule == "authors" and previous is not None and math.floor(epoch) > math.floor(previous):
            for side in self.state.sizes:
                self.state.scalars[f"xi_{side}"] = max(self.xi_init, self.state.largest("zeta", side))

    @property
    def zeta_step_size(self) -> float:
        """The step size of zeta (side ``b``; side ``a`` takes ``zeta_lr_ratio_a`` of it) at the current epoch.

        0 while frozen, then constant, or the cosine or the authors' schedule over ``epochs``.
        """
        if not self.learn_zeta:
            return 0.0
        epoch = self._current_epoch() if self.needs_epoch() else 0.0
        if self.zeta_schedule == "authors":
            return self._authors_step_size(math.floor(epoch))
        if epoch < self.freeze_epochs:
            return 0.0
        if self.epochs is None:
            return self.zeta_lr
        progress = min((epoch - self.freeze_epochs) / (self.epochs - self.freeze_epochs), 1.0)
        return self.zeta_lr * 0.5 * (1.0 + math.cos(math.pi * progress))

    def _authors_step_size(self, epoch: int) -> float:
        """The authors' schedule at whole epoch ``epoch``: cosine, then /10 from half the epochs, /100 from 3/4."""
        if epoch < self.freeze_epochs:
            return 0.0
        assert self.epochs is not None  # the constructor refuses zeta_schedule="authors" without epochs
        span = self.epochs - 1 - self.freeze_epochs
        progress = (epoch - self.freeze_epochs) / span if span > 0 else 0.0
        step = 0.5 * self.zeta_lr * (1.0 + math.cos(math.pi * progress))
        if epoch >= int(self.epochs * 3 / 4):
            return step / 100.0
        if epoch >= int(self.epochs / 2):
            return step / 10.0
        return step

    def direction_loss(self, direction: Direction) -> DirectionResult:
        scores, t = direction.scores, direction.temperature
        columns = direction.column_state
        log_phi_batch = log_phi(direction)
        log_u = log_moving_average(direction.row_state["log_u"], log_phi_batch.detach(), self.gamma)
        # epsilon(zeta_i) is the positive's own term: zeta of the anchor's positive column.
        log_eps = columns["zeta"][scores.positive_column] * (-1.0 / t)
        log_positive_weight = self._log_xi(direction, log_eps) if self.xi_trick else log_eps
        values = t * torch.logaddexp(log_eps, log_phi_batch)
        surrogates = t * weighted_surrogate(log_phi_batch, log_denominator(log_positive_weight, log_u))
        result = DirectionResult(values, surrogates, row_updates={"log_u": log_u})
        step_size = self.zeta_step_size if self.training else 0.0
        if step_size > 0:
            with torch.no_grad():
                log_eps_plus_u = log_denominator(log_eps, log_u)
                row_offset = scores.positive_logit() + log_eps_plus_u
            updates = partial(self.zeta_updates, direction, log_eps, log_eps_plus_u, step_size)
            result.column_pass = ColumnPass(row_offset, updates)
        return result

    def zeta_updates(
        self,
        direction: Direction,
        log_eps: Tensor,
        log_eps_plus_u: Tensor,
        step_size: float,
        column_logsumexp: Tensor,
    ) -> dict[str, Tensor]:
        """The new ``zeta`` and ``zeta_momentum`` of the anchors' positives, in row order (one step on Eq. 10);
        ``log_eps`` is ``-zeta_j / t`` at each positive, ``log_eps_plus_u`` ``log(eps_j + u_i)`` and
        ``column_logsumexp`` the column statistic there."""
        positives = direction.scores.positive_column
        zeta, previous = (direction.column_state[name][positives] for name in ("zeta", "zeta_momentum"))
        gradient = self.zeta_gradient(direction, log_eps, log_eps_plus_u, column_logsumexp)
        momentum = self.zeta_direction(previous, gradient)
        steps = self._side_values(
            direction.positives, {"a": step_size * self.zeta_lr_ratio_a, "b": step_size}, gradient
        )
        return {"zeta": zeta - steps * momentum, "zeta_momentum": momentum}

    def zeta_direction(self, previous: Tensor, gradient: Tensor) -> Tensor:
        """The new ``zeta_momentum`` rows, the direction zeta moves along (see ``zeta_update``)."""
        if self.zeta_update == "heavy_ball":
            return self.zeta_momentum * previous + gradient
        blended = torch.lerp(previous, gradient, self.zeta_theta)  # (1 - theta) previous + theta gradient
        return torch.where(previous == 0, gradient, blended)  # the authors' first visit (z = 0) takes G

    @staticmethod
    def _side_values(segments: Segments, values: Mapping[str, float | Tensor], like: Tensor) -> float | Tensor:
        """``values[side]`` (a number or a 0-d tensor) on each segment's rows: a tensor typed ``like``, or the value
        itself where one segment holds every row."""
        if len(segments) == 1:
            return values[segments[0][0]]
        return torch.cat([_filled(like, values[side], index.numel()) for side, index in segments])

    def zeta_gradient(
        self, direction: Direction, log_eps: Tensor, log_eps_plus_u: Tensor, column_logsumexp: Tensor
    ) -> Tensor:
        r"""Eq. 14 for the anchors' positives ``j = p(i)``, in row order.

        ``1/n - (1/B) [eps_j / (eps_j + u_i) + (n-1)/(B-1) sum_{k != j} e^{(s_kj - s_kk - zeta_j)/t} / (eps_k + u_k)]``,
        where ``u_i`` belongs to the anchor whose positive is ``j`` and ``B`` counts the whole batch's anchors.
        No xi trick here. The sum over ``k`` comes as ``column_logsumexp``, the scores' column statistic at ``j``
        for the row offsets ``s_kk + log(eps_k + u_k)``.
        """
        log_rescale = math.log(direction.pool) - math.log(direction.scores.negative_slots)
        column_sum = torch.exp(column_logsumexp + log_rescale)
        own = torch.exp(log_eps - log_eps_plus_u)
        return 1.0 / direction.contrast_size - (own + column_sum) / direction.batch_anchors

    def _log_xi(self, direction: Direction, like: Tensor) -> float | Tensor:
        """``-xi / t`` per anchor, shaped and typed ``like``: xi of the side its positive comes from (the other
        side)."""
        xi, factor = self.state.scalars, -1.0 / direction.temperature
        log_xi = {side: xi["xi_b" if side == "a" else "xi_a"] * factor for side, _ in direction.rows}
        return self._side_values(direction.rows, log_xi, like)

    def after_update(self, updates: Updates) -> None:
        """xi after a training call: ``"paper"`` ``max(xi, ||zeta||_inf)``, ``"running"`` ``max(xi, max new zeta)``.

        Both read only the call's new values (every process's: ``updates`` holds them all), O(B) and no
        collective. For ``"paper"`` that is the maximum over the whole side: xi covered each row's earlier
        value when it was written, and the rows never written hold ``zeta_init``, covered here.

        Computed on the device, never read by the host (xi stays a 0-d tensor there; a checkpoint saves it as a
        number, :meth:`~uncurated.state.store.SampleState.get_extra_state`). Called once the update has passed
        its check or been refused on the device: new values with a NaN or inf (refused) leave xi as it was.
        """
        if self.xi_rule not in ("paper", "running"):
            return
        floor = abs(self.zeta_init) if self.xi_rule == "paper" else -math.inf
        scalars, keys = self.state.scalars, [f"xi_{side}" for side in self.state.sizes]
        largest: list[Tensor | None] = []
        for side in self.state.sizes:
            new = [values for name, s, _, values in updates if name == "zeta" and s == side and values.numel()]
            values = None if not new else new[0] if len(new) == 1 else torch.cat(new)
            largest.append(None if values is None else (values.abs() if self.xi_rule == "paper" else values).max())
        present = [value for value in largest if value is not None]
        if not present:
            for key in keys:
                scalars[key] = max(scalars[key], floor) if not isinstance(scalars[key], Tensor) else scalars[key]
            return
        device = present[0].device
        dtype = torch.float32 if device.type == "mps" else torch.float64  # float64 as the number was, where it can
        if len(present) < len(largest):
            present = [present[0].new_full((), -math.inf) if value is None else value for value in largest]
        found = torch.stack(present).nan_to_num(nan=-math.inf, posinf=-math.inf)  # a refused update changes nothing
        current = self._xi_vector
        if current is None or any(scalars[key] is not view for key, view in zip(keys, self._xi_views, strict=True)):
            # A number (initial, loaded, set by the authors' rule) is raised to the floor here; a tensor is an
            # earlier result of this method (put back by an undo), at least the floor already.
            current = torch.stack(
                [
                    torch.as_tensor(max(v, floor) if not isinstance(v, Tensor) else v, dtype=dtype, device=device)
                    for v in (scalars[key] for key in keys)
                ]
            )
        xi = torch.maximum(current, found)  # in current's type
        self._xi_vector, self._xi_views = xi, xi.unbind()
        scalars.update(zip(keys, self._xi_views, strict=True))

    def extra_repr(self) -> str:
        return (
            f"zeta_init={self.zeta_init}, zeta_lr={self.zeta_lr}, zeta_update={self.zeta_update!r}, "
            f"zeta_schedule={self.zeta_schedule!r}, freeze_epochs={self.freeze_epochs}, "
            f"learn_zeta={self.learn_zeta}, xi_trick={self.xi_trick}, xi_rule={self.xi_rule!r}, {super().extra_repr()}"
        )


def _filled(like: Tensor, value: float | Tensor, length: int) -> Tensor:
    """``value`` (a number or a 0-d tensor) repeated ``length`` times, typed and placed as ``like``."""
    if isinstance(value, Tensor):
        return value.to(like.device, like.dtype).expand(length)
    return like.new_full((length,), value)
