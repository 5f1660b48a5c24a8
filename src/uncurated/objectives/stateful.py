"""What the global contrastive objectives share: dataset indices, per-sample state, directions.

The global objectives of Wang et al. 2025 (SogCLR, iSogCLR, NUCLR) estimate, for each
anchor, a partition sum over the *whole dataset* rather than the batch, by
moving averages kept per sample. A call therefore takes each pair's
persistent dataset position (``index=``) besides the features, reads the
batch's rows of the state, returns a loss whose gradient is the algorithm's
model gradient, and, in training mode, writes the updated rows back.

Each score matrix of a batch is a :class:`Direction`: one of the engine's
pairings (:func:`~uncurated.objectives.engine.cross_pairing`,
:func:`~uncurated.objectives.engine.two_view_pairing`) plus, for its rows
(anchors) and its columns (contrast samples), which side (``"a"`` or
``"b"``) and which dataset positions they are, and their state. With
``pairing="cross"`` there are two (rows ``a`` against columns ``b``, and the
reverse); with ``"two_view"`` one, whose 2B rows and columns are the ``a``
views then the ``b`` views. Every side's rows are updated by exactly one
direction.

A subclass declares its state and its loss; nothing has to agree by hand:

* :meth:`~StatefulObjective.state_fields` (and, if any,
  :meth:`~StatefulObjective.state_scalars`): the per-sample fields and their
  initial values; every field of a batch's samples is gathered for each call;
* :meth:`~StatefulObjective.side_scores` (if the scores depend on the state):
  a side's inverse temperature as anchors and offset as candidates;
* :meth:`~StatefulObjective.direction_loss`: the per-anchor values, the
  surrogates whose gradient is the algorithm's, and the rows to write back;
* :meth:`~StatefulObjective.after_update` and
  :meth:`~StatefulObjective.needs_epoch`, where the objective has them.

Values and gradients: the returned tensor's *value* is the batch estimate of
the objective (e.g. ``mean tau log(eps + g_i)``) and its *gradient* is the
algorithm's (the moving average ``u`` in the denominator, not the batch's
``g``), so printed losses stay meaningful.

When the state is written: at the end of a training call, except where an
update needs a column statistic (NUCLR's popularities, a :class:`ColumnPass`)
and the scores are tiled with features that require a gradient. Then the
whole update of the call is written when its backward pass runs, which
recomputes every tile anyway and accumulates the statistic on the way
(a separate pass would cost NUCLR half a CLIP step more); a training call
whose loss is never back-propagated leaves the state unchanged. Nothing is
read from the device there: an update with a NaN or inf is refused on the
device (the rows and NUCLR's xi keep their values) and the next training
call raises ``ValueError`` with its first read, unless the caller takes
:meth:`StatefulObjective.take_backward_refusal` first (the trainer does, and
reads it with the loss, and skips the step).
"""

from __future__ import annotations

import math
from contextlib import AbstractContextManager, nullcontext
from functools import partial
from typing import Any

import torch
from torch import Tensor

from ..engine_settings import EngineSettings
from ..host_reads import check_later, flush, pending_checks
from ..process.group import ProcessGroup, place_or_alone
from ..process.shard import Shard
from ..state import SampleState
from ..state.store import Updates
from ..validation import check_choice, check_integer, check_range, features_bound, raise_nonfinite
from .base import Objective, batch_pairing, prepare_features
from .directions import ColumnPass, Direction, DirectionResult, Segments
from .local_rows import column_request
from .tiled import column_logsumexp_after_backward, fused_map

GAMMA_SCHEDULES = ("constant", "cosine")


def log_moving_average(log_u: Tensor, log_value: Tensor, gamma: float) -> Tensor:
    """``log((1 - gamma) u + gamma value)`` from logs; a first visit (``log_u = -inf``) takes ``value``.

    Keeping ``u`` as its log is the per-sample running shift of the authors'
    code taken to its end: at t = 0.01 the exponents span +-200 and ``u`` itself
    would overflow float32.
    """
    if gamma >= 1.0:
        return log_value
    blended = torch.logaddexp(math.log1p(-gamma) + log_u, math.log(gamma) + log_value)
    return torch.where(torch.isneginf(log_u), log_value, blended)


class StatefulObjective(Objective):
    """Base of the global objectives: dataset indices, per-sample state, the gamma schedule.

    Args:
        num_samples: the dataset size ``n``, or ``(n_a, n_b)`` when the two
            sides are indexed separately (e.g. several captions per image).
        temperature: the temperature ``t`` (fixed, as in Wang et al. 2025).
        pairing: ``"cross"`` or ``"two_view"`` (see :class:`~uncurated.objectives.base.Objective`).
        direction_reduction: ``"mean"`` or ``"sum"`` of the two directions.
        normalize: L2-normalize the embeddings first.
        gamma: the moving-average weight of ``u`` (0.8 in Wang et al. 2025), or the
            value the cosine schedule ends at.
        gamma_schedule: ``"constant"``, or ``"cosine"`` (FastCLIP): from 1 at
            epoch 0 down to ``gamma`` at ``gamma_decay_epochs``, then held.
        gamma_decay_epochs: the length of the cosine decay.
        state_device: where the per-sample state lives; ``None`` follows the
            features, ``"cpu"`` keeps it in host memory (only the batch's rows move).
        state_dtype: the floating-point type of the state; ``None`` takes the
            features' type at the first call.
        tiling, block_size, memory_budget, tile_policy, compile: the dense or tiled engine, as for
            :class:`~uncurated.objectives.base.Objective` (the engine's settings,
            :class:`~uncurated.engine_settings.EngineSettings`); the state updates
            are the same either way.
        distributed: as for :class:`~uncurated.objectives.base.Objective`.
            Under a process group each process passes its own pairs and
            their ``index``, and holds the state rows of its range of the
            indices (:mod:`uncurated.state.store`): every process must call
            the objective at every step.
        group: the process group that shares the batches and the state
            (``None``: the default group).

    Call ``objective(a, b, index=...)``: ``index`` holds each pair's position
    in the dataset (or a pair ``(index_a, index_b)``). In training mode
    (``objective.train()``, the default) the call updates the batch's state;
    in eval mode it only reads it. Call ``objective.set_epoch(epoch)`` at the
    start of each epoch when a schedule depends on it.

    **Once per step, from the global batch.** The algorithms update each
    sample's state once per optimizer step, from the batch the gradient is
    taken on, so two guards stand against silent corruption:

    * a loop calls :meth:`begin_step` before each optimizer step (the
      trainer does); a second training-mode call before the next
      :meth:`begin_step` raises ``RuntimeError``. Gradient accumulation opts
      in with ``begin_step(calls=k)``: ``k`` calls (e.g. disjoint
      micro-batches), each updating its own rows. A loop that never calls
      :meth:`begin_step` is still guarded against the plain mistake: a
      training-mode call on the very batch of the previous one, with no
      :meth:`set_epoch` in between, raises (full-batch training calls
      :meth:`begin_step` or :meth:`set_epoch` each step).
    * under ``torch.distributed`` a sample may come from one process only in
      a step (its rows are written once): an index passed by two processes
      raises ``ValueError`` on every process, as do indices outside
      ``[0, num_samples)`` and processes built for different dataset sizes,
      before anything is written.
    """

    def __init__(
        self,
        num_samples: int | tuple[int, int],
        *,
        temperature: float,
        pairing: str = "cross",
        direction_reduction: str = "mean",
        normalize: bool = True,
        gamma: float = 0.8,
        gamma_schedule: str = "constant",
        gamma_decay_epochs: int = 10,
        state_device: torch.device | str | None = None,
        state_dtype: torch.dtype | None = None,
        group: ProcessGroup | None = None,
        **engine: Any,
    ) -> None:
        settings = EngineSettings.of(engine, type(self).__name__)  # the engine's keywords alone pass on
        super().__init__(
            temperature,
            learnable=False,
            pairing=pairing,
            direction_reduction=direction_reduction,
            normalize=normalize,
            group=group,
            **settings.keywords(),
        )
        self._step_calls: int | None = None
        """Training calls left in this step (``None``: :meth:`begin_step` never called)."""
        self._last_batch: tuple[Tensor, Tensor] | None = None
        self.refused_after_backward: Tensor | None = None
        """A 0-d boolean on the device, not read: whether the update the last training call wrote in its backward
        pass (tiled NUCLR) held a NaN or inf and was refused there; the next training call raises with its first
        read, unless the caller (the trainer) reads it first and sets it back to ``None``."""
        self.gamma_final = check_range("gamma", gamma, 0.0, 1.0, low_open=True)
        self.gamma_schedule = check_choice("gamma_schedule", gamma_schedule, GAMMA_SCHEDULES)
        self.gamma_decay_epochs = int(check_range("gamma_decay_epochs", gamma_decay_epochs, 1))
        sizes = (num_samples, num_samples) if isinstance(num_samples, int) else tuple(num_samples)
        if len(sizes) != 2:
            raise ValueError(f"num_samples must be an integer or a pair (n_a, n_b), got {num_samples!r}")
        if pairing == "two_view" and sizes[0] != sizes[1]:
            raise ValueError(f"num_samples: two views of one dataset have one size, got {num_samples!r}")
        self.state = SampleState(
            dict(zip(("a", "b"), sizes, strict=True)),
            self.state_fields(),
            scalars=self.state_scalars(),
            device=state_device,
            dtype=state_dtype,
            place=partial(place_or_alone, self.distributed, self.group),
            group=self.group,
        )

    def sample_values(self, field: str, side: str) -> tuple[int, Tensor]:
        """A copy on the CPU of this process's values of ``field`` (one of :meth:`state_fields`) for ``side``
        (``"a"`` or ``"b"``), with the dataset index of its first row: its rows are the indices ``start``,
        ``start + 1``, ... (all of them in one process). For reports and plots; training reads the state itself."""
        if field not in self.state_fields() or side not in ("a", "b"):
            raise ValueError(
                f"sample_values takes a field of {', '.join(self.state_fields())} and a side a or b, "
                f"got {field!r} and {side!r}"
            )
        start, _ = self.state.range(side)
        return start, self.state.tensors[field, side].detach().float().cpu().clone()

    # -- what a global objective declares --------------------------------------------------

    def state_fields(self) -> dict[str, float]:
        """The per-sample fields and their initial values (``log_u`` starts unvisited)."""
        return {"log_u": -math.inf}

    def state_scalars(self) -> dict[str, float]:
        """Named scalars kept with the state (NUCLR's ``xi`` per side)."""
        return {}

    def side_scores(self, state: dict[str, Tensor], temperature: float) -> tuple[float | Tensor, Tensor | None]:
        """How samples with ``state`` enter the scores: their inverse temperature as anchors (one, or one
        per sample) and the offset of their column as contrast samples (``None``: no offset)."""
        return 1.0 / temperature, None

    def direction_loss(self, direction: Direction) -> DirectionResult:
        raise NotImplementedError

    def after_update(self, updates: Updates) -> None:
        """Run after a training call wrote ``updates`` (NUCLR updates its xi here)."""

    def needs_epoch(self) -> bool:
        """Whether some schedule reads the epoch, so ``set_epoch`` must be called."""
        return self.gamma_schedule == "cosine"

    # -- schedules and steps -----------------------------------------------------------------

    def set_epoch(self, epoch: float) -> None:
        super().set_epoch(epoch)
        self._last_batch = None

    def begin_step(self, calls: int = 1) -> None:
        """Start an optimizer step: the next ``calls`` training-mode calls may update the state, no more.

        Call it once per optimizer step, before the objective. ``calls > 1``
        is the opt-in for gradient accumulation over several calls per step
        (each call then updates the rows of its own batch).
        """
        self._step_calls = check_integer("calls", calls, 1)
        self._last_batch = None
        self.state.start_journal()

    def undo_step(self) -> None:
        """Put back the state rows and scalars this process wrote since :meth:`begin_step` (a step the
        caller skips, e.g. for a non-finite gradient); nothing if :meth:`begin_step` was not called."""
        self.state.undo()

    def saved_state_ranks(self, processes: int) -> list[int]:
        """The saved processes whose per-sample rows overlap this process's (:mod:`uncurated.state.store`)."""
        return self.state.saved_ranks(processes)

    def load_saved_states(self, states: dict[int, dict], processes: int) -> None:
        """Load this process's rows from the saved processes' states (``ValueError`` naming a state whose rows,
        sizes or scalars are not its process's), the rest from the first."""
        key = "state._extra_state"
        merged = dict(states[min(states)])
        merged[key] = self.state.merged_extra_state({rank: state[key] for rank, state in states.items()}, processes)
        self.load_state_dict(merged)

    @property
    def gamma(self) -> float:
        """The moving-average weight at the current epoch."""
        if self.gamma_schedule == "constant":
            return self.gamma_final
        progress = min(self._current_epoch() / self.gamma_decay_epochs, 1.0)
        return self.gamma_final + (1.0 - self.gamma_final) * 0.5 * (1.0 + math.cos(math.pi * progress))

    def _current_epoch(self) -> float:
        if self.epoch is None:
            raise RuntimeError(
                f"{self.name}: call set_epoch(epoch) at the start of each epoch; its schedules depend on it"
            )
        return self.epoch

    def _check_step(self, index_a: Tensor, index_b: Tensor) -> None:
        """Refuse a second update of the state within one step (see the class documentation)."""
        fix = (
            "the per-sample state is updated once per optimizer step. Call objective.begin_step() before each "
            "optimizer step, objective.eval() around a call that must not update the state, or "
            "objective.begin_step(calls=k) to allow k calls per step (gradient accumulation)"
        )
        if self._step_calls is not None:
            if self._step_calls == 0:
                raise RuntimeError(f"{self.name}: a training-mode call beyond those begin_step() allowed: {fix}")
            return
        last = self._last_batch
        if last is not None and all(
            torch.equal(x, y) for x, y in zip(last, _sorted_batch(index_a, index_b), strict=True)
        ):
            raise RuntimeError(f"{self.name}: a second training-mode call on the same batch in one step: {fix}")

    def _record_step(self, index_a: Tensor, index_b: Tensor) -> None:
        """Count an update of the state (after it was written)."""
        if self._step_calls is not None:
            self._step_calls -= 1
        else:
            self._last_batch = _sorted_batch(index_a, index_b)

    # -- the call ----------------------------------------------------------------------------

    def call_temperature(self) -> float:
        """The fixed temperature a call takes, as a Python number: the states' arithmetic takes it so, and a tensor
        would be read from the device at every call."""
        return self.temperature.fixed_value()

    def scale_temperature(self, logit_scale: float | Tensor | None) -> float:
        raise ValueError(
            f"{self.name} keeps its own temperature (fixed, or one per sample), so it takes no logit_scale: build "
            f"it with temperature= and call it as {self.name}(image_features, text_features, index=...)"
        )

    def call_shard(self, local: int, device: torch.device, gathered: bool) -> Shard | None:
        if gathered:
            raise ValueError(
                f"{self.name} takes no gathered=True: each process passes its own pairs and their index=, as each "
                "holds the per-sample state of its own samples"
            )
        return super().call_shard(local, device, gathered)

    def compute(
        self, a: Tensor, b: Tensor, temperature: float | Tensor, *, shard: Shard | None, index=None, **inputs
    ) -> Tensor:
        if index is None:
            raise ValueError(f"{self.name} needs index=: each pair's position in the dataset")
        checks: AbstractContextManager[None] = nullcontext()
        if shard is not None:
            sizes = self.state.sizes
            consistent: dict[str, Any] = {"feature dimension": a.shape[-1], "num_samples": sizes["a"]}
            consistent["num_samples of side b"] = sizes["b"]
            checks = shard.checks(a.device, **consistent)
        with checks:
            if self.training:
                self._check_refusal_later()
            # The call's value checks, the features' finiteness and the indices' range and repeats, are read
            # together with the engine's first read (host_reads; none with check_inputs off: the trainer checks
            # them), at the latest before the state is written. Until then the state is read at indices clamped
            # to its rows (SampleState.gather). Under a process group they are read here, for every process to
            # raise what one raised.
            bound = features_bound(a, b) if self.check_inputs else None
            raw = a, b
            a, b = prepare_features(a, b, self.normalize, shard, finite=False)
            index_a, index_b, summaries = self._indices(index, a.shape[0], a.device, self.check_inputs)
            if bound is not None:
                self._check_later(raw, bound, summaries)
            if shard is not None:
                flush()
        if self.training and self.needs_epoch():
            self._current_epoch()
        if self.training:
            self._check_step(index_a, index_b)
        self.state.follow(a)
        self.state.own(*((0, 1) if shard is None else (shard.rank, shard.world_size)))
        batch_a, batch_b = self._global_indices(index_a, index_b, shard)
        state = self.state.read_rows({"a": batch_a, "b": batch_b}, shard)
        directions = self.directions(a, b, index_a, index_b, state, float(temperature), shard)
        results = fused_map(
            self.direction_loss, directions, [direction.scores for direction in directions], self._requests
        )
        values, surrogates, updates = [], [], []
        for direction, result in zip(directions, results, strict=True):
            values.append(result.values.mean())
            surrogates.append(result.surrogates.mean())
            updates += _split(result.row_updates, direction.rows)
        self.state.refused = None
        if self.training:
            column_passes = [(d, r.column_pass) for d, r in zip(directions, results, strict=True) if r.column_pass]
            self._update_state(updates, column_passes, shard)
            self._record_step(index_a, index_b)
        value, surrogate = sum(values), sum(surrogates)
        if shard is not None:
            value, surrogate = value * shard.weight, surrogate * shard.weight
        if self.direction_reduction == "mean":
            value, surrogate = value / len(values), surrogate / len(surrogates)
        result = value.detach() + (surrogate - surrogate.detach())
        if self.state.refused is not None:  # updates with a NaN or inf, refused on the device: the loss says so
            result = result.masked_fill(self.state.refused, math.nan)
        return result

    def check_indices(self, index, batch: int) -> None:
        """Check ``index`` (as a call takes it) for a batch of ``batch`` pairs, reading its values where it lives:
        what a call checks when :attr:`check_inputs` is on, for a caller that turns it off and holds the indices on
        the host (the trainer, whose batches come from the loader), where reading them stalls no GPU."""
        *_, summaries = self._indices(index, batch, None, True)
        for side, name, summary in summaries:
            self.state.check_index_summary(side, summary.tolist(), name)

    def _check_later(self, raw: tuple[Tensor, Tensor], bound: Tensor, summaries: list) -> None:
        """Queue the features' bound and the indices' summaries, to be read in one synchronization
        (:func:`~uncurated.host_reads.check_later`), and raise what is wrong then, in that order."""

        def check_features(values: list[float]) -> None:
            if not math.isfinite(values[0]):
                raise_nonfinite(*raw)

        check_later(bound, check_features)
        for side, name, summary in summaries:
            check_later(summary, partial(self.state.check_index_summary, side, name=name))

    def take_backward_refusal(self) -> Tensor | None:
        """The last backward pass's :attr:`refused_after_backward` (a boolean on the device, ``None`` when no
        update was written there), handed over once: the next training call no longer raises it."""
        refused, self.refused_after_backward = self.refused_after_backward, None
        return refused

    def _check_refusal_later(self) -> None:
        """Queue the previous training call's :attr:`refused_after_backward`, to raise with this call's first read."""
        refused = self.take_backward_refusal()
        if refused is None:
            return

        def check(values: list[float]) -> None:
            if values[0]:
                raise ValueError(
                    f"{self.name}: the state update of the previous training call, written in its backward pass, "
                    "contained NaN or inf and was refused; its rows and scalars were left unchanged"
                )

        check_later(refused, check)

    def _global_indices(self, index_a: Tensor, index_b: Tensor, shard: Shard | None) -> tuple[Tensor, Tensor]:
        """The dataset positions of the global batch (this process's alone without a shard), checked for a
        sample passed by two processes (unless :attr:`check_inputs` is off: the caller's sampler gives each sample
        to one process)."""
        if shard is None:
            return index_a, index_b
        both = shard.gather(torch.stack([index_a, index_b], dim=1), kind="indices")
        for column, side in enumerate("ab" if self.check_inputs else ""):
            positions = both[:, column]
            values, counts = torch.unique(positions, return_counts=True)
            if bool((counts > 1).any()):
                repeated = int(values[counts > 1][0])
                ranks = sorted({shard.owner(int(k)) for k in torch.nonzero(positions == repeated).flatten()})
                raise ValueError(
                    f"index{'_b' if column and index_a is not index_b else ''}: sample {repeated} of side {side!r} "
                    f"was passed by the processes {ranks} in one step; each sample of a global batch must come from "
                    "one process (its state rows are written once per step). Nothing was written"
                )
        return both[:, 0], both[:, 1]

    def _update_state(self, updates: Updates, column_passes: list[tuple[Direction, ColumnPass]], shard) -> None:
        """Write a training call's updates, once its column statistics are known (after backward, if tiled)."""
        requests = [column_request(d.scores, column_pass.row_offset, shard) for d, column_pass in column_passes]

        def write(column_statistics: list[Tensor], in_call: bool = False) -> None:
            written = list(updates)
            for (direction, column_pass), request, statistic in zip(
                column_passes, requests, column_statistics, strict=True
            ):
                written += _split(column_pass.finish(request.complete(statistic)), direction.positives)
            if shard is not None:  # every process's updates are known after the all-gather of write_rows
                # Checked by a read, or, with check_inputs off (the trainer), refused on the device on every process.
                gathered = self.state.write_rows(written, shard, refuse_on_device=not self.check_inputs)
                if not in_call and self.state.refused is not None:
                    self.refused_after_backward = self.state.refused
                self.after_update(gathered)
                return
            # At most one read before anything is written (host_reads): the call's input checks where still
            # queued (the dense engine reads nothing before), then the updates' finiteness (ValueError naming the
            # field). With nothing else to read (tiles, whose engine read the checks already, within the call or
            # in the backward pass) a bad update is refused on the device instead: the rows keep their values and
            # the loss comes out NaN, or, written in the backward pass, the next training call raises
            # (_check_refusal_later).
            with pending_checks() as pending:
                refuse = not pending.items
                if not refuse:
                    self.state.check_updates_later(written)
                pending.flush()
            self.state.write_rows(written, shard, checked=not refuse, refuse_on_device=refuse)
            if not in_call and self.state.refused is not None:
                self.refused_after_backward = self.state.refused
            self.after_update(written)

        engine = [(request.matrix, request.row_offset) for request in requests]
        if not (engine and column_logsumexp_after_backward(engine, write)):
            with torch.no_grad():
                write([matrix.negative_column_logsumexp(offset) for matrix, offset in engine], in_call=True)

    def directions(
        self,
        a: Tensor,
        b: Tensor,
        index_a: Tensor,
        index_b: Tensor,
        state: dict[str, dict[str, Tensor]],
        temperature: float,
        shard: Shard | None,
    ) -> list[Direction]:
        """The engine's pairing of the batch (this process's rows of it, with a shard), with the dataset
        positions and state of its rows and columns; ``state`` holds the global batch's rows by side."""
        sizes, batch = self.state.sizes, a.shape[0] if shard is None else shard.global_size
        mine = state if shard is None else {side: {k: v[shard.rows] for k, v in state[side].items()} for side in state}
        if self.pairing == "cross":
            (scale_a, offset_a), (scale_b, offset_b) = (self.side_scores(state[side], temperature) for side in "ab")
            forward, backward = batch_pairing(
                "cross", a, b, scale_a, shard, self.tiling, scale_b=scale_b, offset_a=offset_a, offset_b=offset_b
            )
            rows_a, rows_b = [("a", index_a)], [("b", index_b)]
            return [
                Direction(
                    forward, rows_a, rows_b, sizes["b"] - 1, sizes["b"], batch, temperature, mine["a"], state["b"]
                ),
                # The reverse matrix's candidates are this process's a-samples (all of them, in one process).
                Direction(
                    backward, rows_b, rows_a, sizes["a"] - 1, sizes["a"], batch, temperature, mine["b"], mine["a"]
                ),
            ]
        views = {name: torch.cat([state["a"][name], state["b"][name]]) for name in state["a"]}
        scale, offset = self.side_scores(views, temperature)
        (scores,) = batch_pairing("two_view", a, b, scale, shard, self.tiling, column_offset=offset)
        rows = {name: torch.cat([mine["a"][name], mine["b"][name]]) for name in state["a"]}
        segments, positives = [("a", index_a), ("b", index_b)], [("b", index_b), ("a", index_a)]
        pool, contrast = 2 * sizes["a"] - 2, 2 * sizes["a"]
        return [Direction(scores, segments, positives, pool, contrast, 2 * batch, temperature, rows, views)]

    def _indices(
        self, index, batch: int, device: torch.device | None, summarize: bool
    ) -> tuple[Tensor, Tensor, list[tuple[str, str, Tensor]]]:
        """The indices of each side on ``device`` (as given, without one), their shapes and types checked, and,
        with ``summarize``, the :meth:`~uncurated.state.store.SampleState.index_summary` of each side to check,
        not read."""
        if isinstance(index, tuple | list):
            if len(index) != 2:
                raise ValueError("index must be a tensor or a pair (index_a, index_b)")
            index_a, index_b = index
        else:
            index_a = index_b = index
        shared = index_a is index_b
        summaries = []
        for side, side_index, name in (("a", index_a, "index_a"), ("b", index_b, "index_b")):
            name = "index" if shared else name
            self.state.check_index_type(side_index, name)
            if side_index.shape[0] != batch:
                raise ValueError(f"{name} must hold one dataset position per pair: {batch}, got {side_index.shape[0]}")
            checked = shared and side == "b" and self.state.sizes["b"] == self.state.sizes["a"]  # checked as a
            if summarize and not checked and side_index.numel():
                summaries.append((side, name, self.state.index_summary(side_index)))
        if device is None:
            return index_a, index_b, summaries
        return index_a.to(device), index_b.to(device), summaries

    def extra_repr(self) -> str:
        return (
            f"pairing={self.pairing!r}, direction_reduction={self.direction_reduction!r}, gamma={self.gamma_final}, "
            f"gamma_schedule={self.gamma_schedule!r}"
        )


def _split(values_by_field: dict[str, Tensor], segments: Segments) -> Updates:
    updates, start = [], 0
    for side, index in segments:
        stop = start + index.numel()
        whole = len(segments) == 1  # no slicing operator where one segment holds every row
        updates += [
            (name, side, index, values if whole else values[start:stop]) for name, values in values_by_field.items()
        ]
        start = stop
    return updates


def _sorted_batch(index_a: Tensor, index_b: Tensor) -> tuple[Tensor, Tensor]:
    return torch.sort(index_a).values, torch.sort(index_b).values
