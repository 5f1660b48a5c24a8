"""What every objective shares: the temperature, the pairings, the tiling options, the epoch, the diagnostics.

Every objective is an :class:`Objective`, called as
``objective(a, b, *, index=None, labels=None, extra_positives=None)`` on a
batch of pairs ``(a[i], b[i])``. Two families derive from it:

* :class:`ContrastiveObjective`, the batch objectives, written as a *row
  loss*: a function from a score matrix's
  :class:`~uncurated.objectives.row_statistics.RowStatistics` (the same on
  every engine, with the rules a row loss obeys) to one loss per anchor,
  averaged over anchors and combined across directions;
* :class:`~uncurated.objectives.stateful.StatefulObjective`, the global
  objectives, which keep per-sample state and read each pair's dataset
  position (``index=``).

The trainer treats both alike: it calls :meth:`Objective.set_epoch` and
:meth:`Objective.begin_step` before each step (no-ops where nothing depends
on them), passes ``index=`` always and ``labels=`` for the supervised oracle,
and logs :attr:`Objective.diagnostics`.
"""

from __future__ import annotations

import inspect
import math
from collections.abc import Callable
from functools import partial
from typing import Any, ClassVar

import torch
import torch.nn.functional as F
from torch import Tensor, nn

from ..engine_settings import DEFAULT as ENGINE_DEFAULT
from ..engine_settings import EngineSettings
from ..host_reads import check_later, flush, pending_checks
from ..process.group import ProcessGroup, check_group
from ..process.shard import Shard, process_shard
from ..validation import check_choice, check_features, check_labels, check_range, features_bound
from .call_form import OUTPUT_KEY, check_switch, features_fingerprint, scale_temperature
from .engine import PAIRINGS, ScoreMatrix, cross_pairing, two_view_pairing
from .local_rows import partitioned_cross_pairing, partitioned_two_view_pairing
from .normalize import l2_normalize
from .row_statistics import RowStatistics
from .temperature import Temperature
from .tiled import RecordedRequests, TiledScoreMatrix, Tiling, fused_map

RowLoss = Callable[[RowStatistics], Tensor]
DIRECTION_REDUCTIONS = ("mean", "sum")


class _Required:
    def __repr__(self) -> str:
        return "<required>"


REQUIRED = _Required()
"""The default shown for a parameter that has none (``num_samples`` of the global objectives)."""


def prepare_features(
    a: Tensor, b: Tensor, normalize: bool, shard: Shard | None = None, *, finite: bool = True
) -> tuple[Tensor, Tensor]:
    """Check a pair of (B, d) embedding batches (this process's share, with a ``shard``: at least one pair here,
    two in the whole batch) and L2-normalize them unless told not to. ``finite=False`` leaves out the check of
    their values, the one read from the device (see :func:`~uncurated.validation.check_features`)."""
    check_features(a, b, min_batch=2 if shard is None else 1, finite=finite)
    if shard is not None and shard.global_size < 2:
        raise ValueError(f"batch size must be at least 2 to have a negative, got {shard.global_size} in all")
    if normalize:
        a, b = l2_normalize(a, b)
    return a, b


def matrix_type(tiling: Tiling | None, rows: int, cols: int, features: Tensor) -> Callable[..., ScoreMatrix]:
    """The score matrix to build for ``rows`` anchors of ``features`` against ``cols`` candidates: dense, or tiled
    (by the Python engine or the Triton kernels) as ``tiling`` decides."""
    if tiling is not None and (
        tiling.use_kernels(features) or tiling.use_tiles(rows, cols, features.dtype, features.device)
    ):
        return partial(TiledScoreMatrix, tiling=tiling)
    return ScoreMatrix


def score_matrices(
    a: Tensor,
    b: Tensor,
    *,
    temperature: float | Tensor,
    pairing: str,
    labels: Tensor | None = None,
    extra_positives: Tensor | None = None,
    tiling: Tiling | None = None,
    shard: Shard | None = None,
) -> tuple[ScoreMatrix, ...]:
    """The score matrices of a batch: two (one per direction) for ``cross``, one for ``two_view``.

    ``a`` and ``b`` must already be checked and, if wanted, normalized (and
    ``labels`` and ``temperature`` checked). ``tiling`` decides whether they are dense or tiled
    (default: dense). With a ``shard``, ``a`` and ``b`` are this process's
    pairs and the matrices hold its rows of the global batch
    (:mod:`~uncurated.objectives.local_rows`).
    """
    check_choice("pairing", pairing, PAIRINGS)
    if labels is not None:
        labels = labels.to(a.device)
    if pairing == "cross" and extra_positives is not None:
        raise ValueError("extra_positives is supported with pairing='two_view' only")
    scale = temperature.reciprocal() if isinstance(temperature, Tensor) else 1.0 / temperature
    return batch_pairing(pairing, a, b, scale, shard, tiling, labels=labels, extra_positives=extra_positives)


def batch_pairing(
    pairing: str,
    a: Tensor,
    b: Tensor,
    scale: float | Tensor,
    shard: Shard | None,
    tiling: Tiling | None,
    *,
    labels: Tensor | None = None,
    extra_positives: Tensor | None = None,
    scale_b: float | Tensor | None = None,
    offset_a: Tensor | None = None,
    offset_b: Tensor | None = None,
    column_offset: Tensor | None = None,
) -> tuple[ScoreMatrix, ...]:
    """The engine's ``pairing`` of a batch: :func:`~.engine.cross_pairing` (with ``scale_b``, ``offset_a``,
    ``offset_b``) or :func:`~.engine.two_view_pairing` (with ``column_offset``) of the whole batch, or, with a
    ``shard``, their twins of :mod:`~.local_rows` for this process's rows; dense or tiled as ``tiling`` decides
    (:func:`matrix_type`)."""
    views = 2 if pairing == "two_view" else 1
    rows, columns = (a.shape[0], a.shape[0]) if shard is None else (shard.local_size, shard.global_size)
    matrix = matrix_type(tiling, views * rows, views * columns, a)
    if pairing == "cross":
        if shard is None:
            return cross_pairing(
                a, b, scale, labels, scale_b=scale_b, offset_a=offset_a, offset_b=offset_b, matrix=matrix
            )
        return partitioned_cross_pairing(
            a, b, shard, scale, labels, scale_b=scale_b, offset_a=offset_a, offset_b=offset_b, matrix=matrix
        )
    if shard is None:
        return two_view_pairing(a, b, scale, labels, extra_positives, column_offset=column_offset, matrix=matrix)
    return partitioned_two_view_pairing(
        a, b, shard, scale, labels, extra_positives, column_offset=column_offset, matrix=matrix
    )


class Objective(nn.Module):
    """Base of every objective: temperature, pairing, direction reduction, normalization, tiling, epoch.

    Subclasses set ``name`` (the key of :func:`uncurated.objectives.build`),
    ``papers`` (the keys of their papers in :mod:`uncurated.references`)
    and their paper's defaults in the ``default_*`` class attributes, take
    their own parameters in ``__init__`` and pass the common ones on, and
    implement :meth:`compute`.

    Args:
        temperature: the temperature ``t`` of the scores ``cos / t`` (> 0);
            ``None`` takes the objective's default.
        learnable: learn the temperature (CLIP's log inverse temperature, at most 100).
        temperature_parametrization: how a learnable temperature is learned:
            ``"log"`` (CLIP) or ``"identity"`` (WPSE: ``1/t`` itself in [1, 100]).
        pairing: ``"cross"`` (``a[i]`` pairs with ``b[i]``, both directions scored,
            CLIP style) or ``"two_view"`` (the SimCLR batch of 2B anchors over
            ``[a; b]``, own view masked, N = 2B - 2 negatives); ``None`` takes
            the objective's default.
        direction_reduction: ``"mean"`` or ``"sum"`` of the two directions of a
            cross pairing (ignored for two views); ``None`` takes the default.
        normalize: L2-normalize the embeddings first (scores are cosines / t).
        **engine: the engine's settings, one :class:`~uncurated.engine_settings.EngineSettings`
            (``ValueError`` naming a setting out of its range):
        tiling: ``"auto"`` (the Triton kernels for CUDA features when triton
            imports; otherwise tile when the dense score matrix would exceed
            ``memory_budget``), ``"always"``, ``"never"`` or ``"triton"`` (the
            kernels; ``pip install 'uncurated[triton]'``); tiles keep memory
            linear in the batch (:mod:`uncurated.objectives.tiled`).
        block_size: the side of the tiles (>= 1), ``None`` to choose it from
            the batch, the dimension and the budget; with ``"triton"`` the
            kernels' block, a power of two in [16, 256].
        memory_budget: bytes for the score-matrix work (>= 1 MiB), ``None``
            to take the tile policy's (1 GiB on the CPU; on CUDA half the
            device's free memory).
        tile_policy: ``"auto"`` (follow the features' device), ``"cpu"``
            (tiles of at most 1,024 x 1,024) or ``"cuda"`` (tiles as large as
            the budget allows, for fewer kernel launches); see
            :mod:`uncurated.objectives.tiled.policy`.
        compile: fuse each tile's elementwise work with ``torch.compile``
            (fewer kernel launches and passes over the tile on a GPU);
            ``None`` compiles on CUDA where Triton is installed, not on the CPU.
        distributed: how a call under ``torch.distributed`` is read. ``None``
            (the default): when a process group of several processes is
            initialized, each process passes its own pairs, the objective
            gathers the rest of the global batch itself and returns the mean
            over its own rows (weighted by its share of the batch if the
            shares differ), so that the gradients DDP averages are one
            process's on the whole batch (:mod:`~uncurated.process.shard`,
            :mod:`~uncurated.objectives.local_rows`); every process must call
            it at every step. ``False``: every call is a whole batch;
            ``True``: require a process group.
        group: the ``torch.distributed`` process group whose processes split
            each batch (``None``: the default group; open_clip's ``rank`` and
            ``world_size`` are read from it).
    """

    name: ClassVar[str] = ""
    papers: ClassVar[tuple[str, ...]] = ()
    """The keys of the objective's papers in :data:`uncurated.references.REFERENCES`, its own first."""
    default_temperature: ClassVar[float] = 0.07
    default_pairing: ClassVar[str] = "cross"
    default_direction_reduction: ClassVar[str | None] = "mean"
    default_learnable: ClassVar[bool] = False
    call_inputs: ClassVar[tuple[str, ...]] = ()
    """Which of ``labels=`` and ``extra_positives=`` a call may give (``index=`` every objective takes)."""
    diagnostic_names: ClassVar[tuple[str, ...]] = ()
    """The names of :attr:`diagnostics`, known before the first call (the trainer's columns)."""
    check_inputs: bool = True
    """Whether a call checks its inputs' values: the features finite and, for the global objectives, the indices
    in range and not repeated. It is the one read from the device of a call (a GPU waits for it), so a caller
    that checks them itself turns it off: the trainer reads the embeddings' finiteness once per step and checks
    the indices on the host, where its loader holds them (``StatefulObjective.check_indices``). The shapes and
    types are checked either way."""

    def __init__(
        self,
        temperature: float | None = None,
        *,
        learnable: bool | None = None,
        temperature_parametrization: str = "log",
        pairing: str | None = None,
        direction_reduction: str | None = None,
        normalize: bool = True,
        group: ProcessGroup | None = None,
        **engine: Any,
    ) -> None:
        super().__init__()
        self.engine = EngineSettings.of(engine, type(self).__name__)
        """The engine's settings (:mod:`uncurated.engine_settings`)."""
        self.tiling = Tiling.of(self.engine)
        self.distributed = self.engine.distributed
        self.group = check_group(group)
        """The processes that split each batch (``None``: the default process group)."""
        self.temperature = Temperature(
            self.default_temperature if temperature is None else temperature,
            self.default_learnable if learnable is None else learnable,
            temperature_parametrization,
        )
        self.pairing = check_choice("pairing", pairing or self.default_pairing, PAIRINGS)
        if self.default_direction_reduction is None:
            if direction_reduction is not None:
                raise ValueError(f"direction_reduction does not apply to {self.name}: it scores each pair once")
            self.direction_reduction = None
        else:
            self.direction_reduction = check_choice(
                "direction_reduction", direction_reduction or self.default_direction_reduction, DIRECTION_REDUCTIONS
            )
        self.normalize = bool(normalize)
        self.epoch: float | None = None
        self._recorded: dict[str, dict[int, Tensor]] = {}
        self._diagnostics: dict[str, list[Tensor]] = {}
        """The last call's per-anchor diagnostics, by name: one tensor per score matrix."""
        self._requests = RecordedRequests()
        """What the row loss asks of a tiled batch, kept so that later calls skip the engine's recording run."""

    @classmethod
    def defaults(cls) -> dict[str, object]:
        """Every constructor parameter with its default, the common ones first (:data:`REQUIRED` where none).

        Follows ``**options`` (any ``**`` but ``**engine``) from a constructor to its parent's and reads
        ``**engine`` as the engine's settings, so the listing is exactly what
        the constructor takes.
        """
        chain = []
        for owner in cls.__mro__:
            if "__init__" not in vars(owner):
                continue
            parameters = list(inspect.signature(vars(owner)["__init__"]).parameters.values())[1:]
            chain.append([p for p in parameters if p.kind not in (p.VAR_POSITIONAL, p.VAR_KEYWORD)])
            rest = next((p.name for p in parameters if p.kind is p.VAR_KEYWORD), None)
            if rest == "engine":  # the engine's settings, not the parent's parameters
                chain[-1] += [
                    inspect.Parameter(name, inspect.Parameter.KEYWORD_ONLY, default=value)
                    for name, value in ENGINE_DEFAULT.keywords().items()
                ]
            if rest in (None, "engine"):
                break
        values: dict[str, object] = {}
        for parameters in reversed(chain):  # the most derived constructor's default wins
            for parameter in parameters:
                default = REQUIRED if parameter.default is parameter.empty else parameter.default
                if default is None:
                    default = getattr(cls, f"default_{parameter.name}", None)
                values[parameter.name] = default
        order = [p.name for p in chain[-1]] + [p.name for parameters in chain[:-1] for p in parameters]
        merged = {name: values[name] for name in dict.fromkeys(order)}
        if "direction_reduction" in merged and merged["direction_reduction"] is None:
            del merged["direction_reduction"]
        return merged

    def forward(
        self,
        image_features: Tensor,
        text_features: Tensor,
        logit_scale: float | Tensor | None = None,
        logit_bias: float | Tensor | None = None,
        *,
        index: Tensor | None = None,
        labels: Tensor | None = None,
        extra_positives: Tensor | None = None,
        gathered: bool = False,
        output_dict: bool = False,
    ) -> Tensor | dict[str, Tensor]:
        """The objective on the batch of pairs ``(a[i], b[i])`` at this module's temperature, or at the model's.

        ``a`` and ``b`` (``image_features`` and ``text_features``, open_clip's
        names, so that ``loss(**model_out, output_dict=True)`` works; two views
        for a two-view pairing) are (B, d) batches.

        ``index`` holds each pair's dataset position (the global objectives
        need it; the batch objectives do not and leave it alone), ``labels``
        the classes for the supervised oracle, ``extra_positives`` further
        positive views; an objective that takes neither raises ``TypeError``.

        open_clip's call form (:mod:`~uncurated.objectives.call_form`):
        ``logit_scale`` is the model's inverse temperature (``exp`` of its
        learned parameter; ``t = 1 / logit_scale``, and the gradient flows
        back into the model), for an objective built with a fixed
        temperature (``ValueError`` if it learns its own); ``logit_bias``
        SigLIP's bias, the model's instead of the objective's.
        ``output_dict=True`` returns ``{"contrastive_loss": value}``.
        ``gathered=True``: ``a`` and ``b`` are the whole global batch on every
        process (the caller gathered them), scored as one batch rather than
        gathered again; without it, a call in which every process passed the
        same features raises ``ValueError``.
        """
        value = self._evaluate(
            image_features,
            text_features,
            self.call_temperature() if logit_scale is None else None,
            logit_scale=logit_scale,
            logit_bias=logit_bias,
            gathered=check_switch("gathered", gathered),
            index=index,
            labels=labels,
            extra_positives=extra_positives,
        )
        return {OUTPUT_KEY: value} if check_switch("output_dict", output_dict) else value

    def call_temperature(self) -> float | Tensor:
        """The temperature a call takes: the module's, a tensor autograd follows (positive by its parametrization:
        no check, so no read by the host per step)."""
        return self.temperature()

    def scale_temperature(self, logit_scale: float | Tensor | None) -> float | Tensor:
        """The temperature of a call given the model's ``logit_scale`` (``1 / logit_scale``); ``ValueError`` if this
        objective learns its own temperature, which the call would leave untrained."""
        if self.temperature.learnable:
            raise ValueError(
                f"{self.name} learns its own temperature (learnable=True), so it takes no logit_scale: build it "
                f"with learnable=False to score at the model's logit_scale, or call it without one"
            )
        return scale_temperature(logit_scale)

    def loss(
        self,
        a: Tensor,
        b: Tensor,
        *,
        temperature: float | Tensor,
        index: Tensor | None = None,
        labels: Tensor | None = None,
        extra_positives: Tensor | None = None,
        logit_bias: float | Tensor | None = None,
    ) -> Tensor:
        """The objective at ``temperature`` (a float, or a tensor autograd follows, > 0): what ``forward`` and the
        functional twins compute. Records the call's :attr:`diagnostics`."""
        check_range("temperature", temperature, 0.0, low_open=True)
        return self._evaluate(
            a, b, temperature, index=index, labels=labels, extra_positives=extra_positives, logit_bias=logit_bias
        )

    def _evaluate(
        self,
        a: Tensor,
        b: Tensor,
        temperature: float | Tensor | None,
        *,
        logit_scale: float | Tensor | None = None,
        gathered: bool = False,
        **inputs: Tensor | float | None,
    ) -> Tensor:
        """:meth:`loss` once its temperature is known to be positive (``None``: ``1 / logit_scale``)."""
        for name, value in inputs.items():
            if value is not None and name != "index" and name not in self.call_inputs:
                hint = " (a bias is SigLIP's)" if name == "logit_bias" else ""
                raise TypeError(f"{self.name} does not take {name}={hint}")
        self._recorded = {}
        local, device = (a.shape[0], a.device) if isinstance(a, Tensor) and a.ndim else (0, torch.device("cpu"))
        shard = self.call_shard(local, device, gathered)
        with pending_checks() as checks:  # the inputs' checks, read with the engine's first read (host_reads)
            if temperature is None:
                temperature = self.scale_temperature(logit_scale)
            value = self.compute(a, b, temperature, shard=shard, **inputs)
            checks.flush()
        self._diagnostics = {name: list(per_matrix.values()) for name, per_matrix in self._recorded.items()}
        self._recorded = {}
        return value

    def call_shard(self, local: int, device: torch.device, gathered: bool) -> Shard | None:
        """This process's :class:`~uncurated.process.shard.Shard` of the call's global batch of which it holds
        ``local`` pairs, or ``None`` for a whole batch: alone, or ``gathered`` (the caller passed the global
        batch)."""
        return None if gathered else process_shard(local, self.distributed, device, self.group)

    def compute(self, a: Tensor, b: Tensor, temperature: float | Tensor, *, shard: Shard | None, **inputs) -> Tensor:
        """The objective's value on the batch, or on this process's rows of it with a ``shard``; see :meth:`loss`."""
        raise NotImplementedError

    def prepare(
        self,
        a: Tensor,
        b: Tensor,
        shard: Shard | None,
        *,
        labels: Tensor | None = None,
        extra_positives: Tensor | None = None,
    ) -> tuple[Tensor, Tensor, Tensor | None]:
        """Check a call's inputs and normalize the features (and extra views) unless told not to.

        With a ``shard`` every process checks its own inputs and all raise
        what any one raised; the feature dimension must agree across processes.
        """
        if shard is None:
            return self._prepare(a, b, shard, labels, extra_positives)
        fingerprint = features_fingerprint(a, b)
        with shard.checks(a.device, fingerprint=fingerprint, **{"feature dimension": a.shape[-1]}):
            prepared = self._prepare(a, b, shard, labels, extra_positives)
            flush()  # read here, so that every process raises what one raised
            return prepared

    def _prepare(self, a, b, shard, labels, extra_positives) -> tuple[Tensor, Tensor, Tensor | None]:
        a, b = prepare_features(a, b, self.normalize, shard, finite=self.check_inputs)
        if labels is not None:
            check_labels(labels, a.shape[0])
        if extra_positives is not None:
            extra_positives = _prepare_extra_positives(extra_positives, a, self.normalize)
        return a, b, extra_positives

    def record(self, name: str, scores: RowStatistics, values: Tensor) -> None:
        """Note a per-anchor diagnostic of one score matrix (detached; the last note per matrix counts)."""
        self._recorded.setdefault(name, {})[id(scores)] = values.detach() if values.requires_grad else values

    @property
    def diagnostics(self) -> dict[str, float]:
        """The last call's diagnostics, averaged over its anchors (e.g. DCL's ``clamped_fraction``); averaged when
        read, not at every call."""
        return {
            name: float(torch.cat([values.flatten() for values in per_matrix]).float().mean())
            for name, per_matrix in self._diagnostics.items()
        }

    def set_epoch(self, epoch: float) -> None:
        """Tell the objective the current (possibly fractional) epoch, for the schedules that read it."""
        self.epoch = check_range("epoch", epoch, 0.0)

    def begin_step(self, calls: int = 1) -> None:
        """Start an optimizer step; only the global objectives, which update state once per step, care."""

    def undo_step(self) -> None:
        """Undo what the calls since :meth:`begin_step` changed in the objective's per-sample state (none here)."""

    def check_indices(self, index, batch: int) -> None:
        """Check ``index`` (as a call takes it) for a batch of ``batch`` pairs where it lives, for a caller that
        turns :attr:`check_inputs` off and holds the indices on the host: nothing here, where no index is read."""

    def take_backward_refusal(self) -> Tensor | None:
        """Whether the last backward pass refused a state update written there (a boolean on the device, handed
        over once), ``None`` when none was written there: always ``None`` here, where no state is kept."""
        return None

    def saved_state_ranks(self, processes: int) -> list[int]:
        """Which of the states that ``processes`` training processes saved (one each, their ``state_dict()``)
        this process loads with :meth:`load_saved_states`: one, here, as they are all alike."""
        return [0]

    def load_saved_states(self, states: dict[int, dict], processes: int) -> None:
        """Load the saved states :meth:`saved_state_ranks` named, by rank, of a run of ``processes`` processes."""
        self.load_state_dict(states[min(states)])

    def extra_repr(self) -> str:
        text = f"pairing={self.pairing!r}, direction_reduction={self.direction_reduction!r}, normalize={self.normalize}"
        if self.tiling != Tiling():
            tiling = self.tiling
            text += f", tiling={tiling.mode!r}, block_size={tiling.block_size}, memory_budget={tiling.memory_budget}"
            text += f", tile_policy={tiling.policy!r}, compile={tiling.compile}"
        return text


class ContrastiveObjective(Objective):
    """Base of the batch objectives: :meth:`row_loss` averaged over anchors, combined across directions.

    With ``pairing="cross"`` the row loss is applied to both directions (a to
    b and b to a) and the two means are combined by ``direction_reduction``
    (an objective without one, SigLIP, scores each pair once, in one
    direction); with ``"two_view"`` it is the mean over the 2B anchors.
    """

    def row_loss(self, scores: RowStatistics) -> Tensor:
        """(R,) the loss of each anchor (row) of ``scores``, in the paper's terms: from its row statistics alone,
        asking for the same ones whatever their values, with no side effect (it runs twice on the tiled engines;
        see :mod:`~uncurated.objectives.row_statistics`)."""
        raise NotImplementedError

    def compute(
        self,
        a: Tensor,
        b: Tensor,
        temperature: float | Tensor,
        *,
        shard: Shard | None,
        labels: Tensor | None = None,
        extra_positives: Tensor | None = None,
        **unused,
    ) -> Tensor:
        a, b, extra_positives = self.prepare(a, b, shard, labels=labels, extra_positives=extra_positives)
        return self.contrastive_term(a, b, temperature, shard=shard, labels=labels, extra_positives=extra_positives)

    def contrastive_term(
        self,
        a: Tensor,
        b: Tensor,
        temperature: float | Tensor,
        *,
        shard: Shard | None = None,
        labels: Tensor | None = None,
        extra_positives: Tensor | None = None,
    ) -> Tensor:
        """The row loss's mean over the batch's anchors (this process's, with a ``shard``) on prepared features
        (see :meth:`prepare`)."""
        matrices = score_matrices(
            a,
            b,
            temperature=temperature,
            pairing=self.pairing,
            labels=labels,
            extra_positives=extra_positives,
            tiling=self.tiling,
            shard=shard,
        )
        if self.direction_reduction is None:
            matrices = matrices[:1]
        rows = fused_map(self.row_loss, matrices, recorded=self._requests)
        weight = (shard.weight if shard is not None else 1.0) / (len(rows) if self.direction_reduction == "mean" else 1)
        if all(r.shape == rows[0].shape for r in rows):  # the directions' means in two operators, not five
            weight *= len(rows)
            total = rows[0].mean() if len(rows) == 1 else torch.cat(rows).mean()
        else:
            total = torch.stack([r.mean() for r in rows]).sum()
        return total if weight == 1.0 else total * weight


def _prepare_extra_positives(extra: Tensor, a: Tensor, normalize: bool) -> Tensor:
    batch, dim = a.shape
    if not isinstance(extra, Tensor) or extra.ndim != 3 or extra.shape[0] != batch or extra.shape[2] != dim:
        shape = getattr(extra, "shape", None)
        raise ValueError(f"extra_positives must have shape ({batch}, M - 1, {dim}), got {shape}")

    def check(bound: list[float]) -> None:
        if not math.isfinite(bound[0]):
            raise ValueError("extra_positives contains non-finite values (NaN or inf)")

    check_later(features_bound(extra), check)
    return F.normalize(extra, dim=-1) if normalize else extra
