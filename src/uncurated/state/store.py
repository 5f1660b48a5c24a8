"""A store of per-sample tensors, indexed by each pair's persistent position in the dataset, split across processes.

The global objectives of Wang et al. 2025 (SogCLR, iSogCLR, NUCLR) keep a few numbers
per training sample: moving averages ``u``, popularities ``zeta``, individual
temperatures and their optimizer moments. :class:`SampleState` holds them as
tensors for each *side* of the pairs (``"a"``, the first argument of the
objective, e.g. images; ``"b"``, the second, e.g. texts), gathers the rows of
a batch and writes them back.

**Partitioned by index ranges.** Under ``torch.distributed`` with ``W``
processes, process ``r`` holds only the rows of the indices
``[floor(r n / W), floor((r + 1) n / W))`` of each side (``n`` the side's
size): about ``n / W`` rows. A step's rows travel: the rows of the global
batch are read from their owners by one all-reduce (:meth:`read_rows`), and
each process's updates reach their owners by one all-gather
(:meth:`write_rows`). Ranges rather than the process that reads a sample:
the training batches are a seeded permutation of the whole dataset cut into
global batches (and webdataset shards go to readers by position, which
changes with the number of readers), so any sample can be in any process's
share of a step, and NUCLR needs the popularities of every candidate of the
global batch anyway. Ranges, rather than indices modulo ``W``, make a
process's rows one slice of the index space: a checkpoint written by ``W``
processes is ``W`` slices, and a run resumed by ``W'`` processes reads only
the slices that overlap its own (:meth:`merged_extra_state`). Any index space
works: a map-style dataset's positions, or the webdataset reader's
``shard * samples_per_shard + position`` (unused slots of short shards are
rows like any other).

Memory: ``4 (n / W) (fields per side) (sides)`` bytes per process in
float32; e.g. NUCLR's three fields on both sides of 12 million pairs take
288 MB in one process, 72 MB in each of four. With ``device="cpu"`` the
tensors stay in host memory and only the batch's rows travel to the
training device (Wang et al. 2025, App. F.1).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping
from typing import TYPE_CHECKING

import torch
from torch import Tensor, nn

from ..host_reads import check_later
from ..precision import statistics_dtype
from ..process.group import ProcessGroup, largest, owned_range

if TYPE_CHECKING:
    from ..process.shard import Shard

SIDES = ("a", "b")

Updates = list[tuple[str, str, Tensor, Tensor]]
"""``(field, side, index, values)``: rows to write."""


class SampleState(nn.Module):
    """Per-sample tensors ``fields`` for ``sizes[side]`` samples on each side, this process's range of them.

    Args:
        sizes: the number of samples on each side, e.g. ``{"a": n, "b": n}``.
        fields: the initial value of each field (the same on every side).
            A field initialised at ``-inf`` (a log-domain value not yet set)
            may hold ``-inf``; every other value must be finite.
        scalars: named scalar values kept with the state (e.g. NUCLR's ``xi``),
            the same on every process: numbers, or 0-d tensors an objective
            keeps on the device (saved as numbers).
        device: where the tensors live. ``None`` follows the features: the
            state moves to the device of the first batch it serves.
        dtype: the floating-point type of the fields. ``None`` follows the
            features' type at the first batch, at least float32 (half-precision
            features keep float32 state: the precision contract of
            :mod:`uncurated.precision`).
        place: returns ``(rank, world_size)``, this process's place, asked
            once, when the rows are first used (created, loaded or saved);
            the objectives pass the process group's
            (:func:`uncurated.process.group.place_or_alone`). ``None``: one
            process holding every row.

    The state is saved through ``state_dict()`` (as the module's extra state,
    so ``.to()`` never moves it): this process's rows and their range.
    ``load_state_dict()`` checks the sizes, the fields, the range and that the
    values are finite.
    """

    def __init__(
        self,
        sizes: Mapping[str, int],
        fields: Mapping[str, float],
        *,
        scalars: Mapping[str, float] | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
        place: Callable[[], tuple[int, int]] | None = None,
        group: ProcessGroup | None = None,
    ) -> None:
        super().__init__()
        for side, size in sizes.items():
            if side not in SIDES:
                raise ValueError(f"sizes: side must be one of {SIDES}, got {side!r}")
            if isinstance(size, bool) or not isinstance(size, int) or size < 2:
                raise ValueError(f"num_samples must be an integer >= 2, got {size!r} for side {side!r}")
        self.sizes = dict(sizes)
        self.initial = dict(fields)
        self.follow_device = device is None
        self.follow_dtype = dtype is None
        self._device = torch.device("cpu") if device is None else torch.device(device)
        self._dtype = dtype or torch.float32
        self._tensors: dict[tuple[str, str], Tensor] | None = None
        self.scalars: dict[str, float | Tensor] = {name: float(value) for name, value in (scalars or {}).items()}
        self._place = place
        self.group = group
        self._settled: tuple[int, int] | None = None
        self._journal: list | None = None
        """The rows and scalars as they were before this step's writes (:meth:`start_journal`), or ``None``."""
        self.refused: Tensor | None = None
        """Whether the last :meth:`write_rows` with ``refuse_on_device`` refused its updates (a 0-d boolean on the
        device, not read), else ``None``."""

    # -- the partition ---------------------------------------------------------------------------

    @property
    def rank(self) -> int:
        return self._where()[0]

    @property
    def world_size(self) -> int:
        return self._where()[1]

    def _where(self) -> tuple[int, int]:
        if self._settled is None:
            self._settled = (0, 1) if self._place is None else self._place()
        return self._settled

    def own(self, rank: int, world_size: int) -> None:
        """Check that this store holds the rows of process ``rank`` of ``world_size`` (fixed at first use)."""
        if self._where() != (rank, world_size):
            raise RuntimeError(
                f"the per-sample state holds the rows of process {self.rank} of {self.world_size}; it was called as "
                f"process {rank} of {world_size}. Initialize the process group before the objective's first call, "
                "load or save; a run continues under another number of processes from a checkpoint"
            )

    def range(self, side: str) -> tuple[int, int]:
        """The indices ``[start, stop)`` of ``side`` this process holds."""
        return owned_range(self.sizes[side], self.rank, self.world_size)

    @property
    def tensors(self) -> dict[tuple[str, str], Tensor]:
        """This process's rows by ``(field, side)`` (row ``k`` is index ``start + k``), created at their initial
        values on first use."""
        if self._tensors is None:
            self._tensors = {}
            for field, value in self.initial.items():
                for side in self.sizes:
                    start, stop = self.range(side)
                    self._tensors[field, side] = torch.full(
                        (stop - start,), value, dtype=self._dtype, device=self._device
                    )
        return self._tensors

    @tensors.setter
    def tensors(self, tensors: dict[tuple[str, str], Tensor]) -> None:
        self._tensors = tensors

    @property
    def device(self) -> torch.device:
        return self._device

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

    def memory_bytes(self) -> int:
        """The memory this process's per-sample tensors take."""
        return sum(tensor.numel() * tensor.element_size() for tensor in self.tensors.values())

    def check_index(self, side: str, index: Tensor, name: str = "index") -> None:
        """Check a batch's dataset indices ``name`` for ``side``: integers in [0, n) of that side, no repeats.

        One read of three numbers (:meth:`index_summary`); none from a GPU for an index on the host.
        """
        self.check_index_type(index, name)
        if index.numel():
            self.check_index_summary(side, self.index_summary(index).tolist(), name)

    def check_index_type(self, index: Tensor, name: str = "index") -> None:
        """The part of :meth:`check_index` the host can tell without reading values: a 1-D integer tensor."""
        if not isinstance(index, Tensor) or index.ndim != 1 or index.is_floating_point() or index.is_complex():
            raise ValueError(f"{name} must be a 1-D integer tensor of dataset positions, got {index!r:.80}")

    @staticmethod
    def index_summary(index: Tensor) -> Tensor:
        """``[smallest, largest, repeats]`` of a non-empty index, on its device and not read, for
        :meth:`check_index_summary`: a caller reads it with its other checks, in one synchronization."""
        ordered = torch.sort(index).values
        repeats = (ordered[1:] == ordered[:-1]).sum()
        return torch.stack([ordered[0], ordered[-1], repeats])

    def check_index_summary(self, side: str, summary: list, name: str = "index") -> None:
        """Raise for an :meth:`index_summary`, read, that is out of ``side``'s range or has a repeat."""
        low, high, repeats = (int(value) for value in summary)
        size = self.sizes[side]
        if low < 0 or high >= size:
            bad = low if low < 0 else high
            raise ValueError(
                f"{name} must be in [0, {size}) on side {side!r} (its num_samples given at construction), got {bad}"
            )
        if repeats:
            raise ValueError(f"{name} must not repeat a sample within a batch (the state update needs one row each)")

    def follow(self, like: Tensor) -> None:
        """Take the device and type of the features ``like`` where the state follows them.

        The first call settles them: a state not yet used is created there
        directly (its initial values exact in the features' type).
        """
        if self.follow_device:
            self._device = like.device
        if self.follow_dtype:
            self._dtype = statistics_dtype(like.dtype)
        if self._tensors is not None:
            self._tensors = {key: tensor.to(self._device, self._dtype) for key, tensor in self._tensors.items()}
        self.follow_device = self.follow_dtype = False

    # -- one process ---------------------------------------------------------------------------

    def gather(self, field: str, side: str, index: Tensor) -> Tensor:
        """The values of ``field`` for the samples ``index`` of ``side`` (all held here), on ``index``'s device.

        State kept on the host for a batch on a CUDA device travels through pinned memory, so that its copy
        runs asynchronously (``non_blocking``).
        """
        rows = self.tensors[field, side][self._rows(side, index)]
        if rows.device.type == "cpu" and index.device.type == "cuda":
            rows = rows.pin_memory()
        return rows.to(index.device, non_blocking=True)

    def scatter(
        self, updates: Updates, *, checked: bool = False, refuse_on_device: bool = False, ok: Tensor | None = None
    ) -> Tensor | None:
        """Write ``(field, side, index, values)`` updates of rows held here, all or none.

        Every update is checked first (finite, or ``-inf`` where the field
        allows it), all in one reduction and one read by the host; a bad one
        raises ``ValueError`` naming it before anything is written. ``checked``:
        the caller has read that check already (:meth:`check_updates_later`).
        ``refuse_on_device``: nothing is read; the rows are written with
        ``torch.where(ok, new, old)``, so that a bad update leaves them all as
        they were, and the 0-d boolean *refused* is returned for the caller to
        surface (the global objectives make their loss NaN with it). ``ok``: that check's value computed by the
        caller (over every process's updates), not read.
        """
        if ok is None and not checked:
            ok = self._updates_finite(updates)
        if ok is not None and not refuse_on_device and not bool(ok):
            self._raise_nonfinite(updates)
        keep = ok if refuse_on_device else None
        with torch.no_grad():
            for field, side, index, values in updates:
                target = self.tensors[field, side]
                rows = self._rows(side, index)
                old = target[rows] if self._journal is not None or keep is not None else None  # indexing copies
                if self._journal is not None:
                    self._journal.append((target, rows, old))
                new = values.to(target.device, target.dtype)
                if keep is not None and old is not None:
                    new = torch.where(keep.to(target.device), new, old)
                target[rows] = new
        return None if keep is None else keep.logical_not()

    def check_updates_later(self, updates: Updates) -> None:
        """The check of :meth:`scatter`, queued to be read with the call's other reads
        (:func:`~uncurated.host_reads.check_later`); its caller writes with ``checked=True`` once it is read."""
        ok = self._updates_finite(updates)
        if ok is not None:
            check_later(ok, lambda values: None if values[0] else self._raise_nonfinite(updates))

    def _updates_finite(self, updates: Updates) -> Tensor | None:
        """Whether every update is finite, or ``-inf`` where its field allows it: a 0-d boolean, not read."""
        bounded = [self._bounded(field, values) for field, _, _, values in updates]
        return (torch.cat(bounded) < math.inf).all() if bounded else None

    def _raise_nonfinite(self, updates: Updates) -> None:
        for field, side, _, values in updates:
            self._check_values(field, values, f"new {field} values for side {side!r}")

    def _rows(self, side: str, index: Tensor) -> Tensor:
        """The rows of this process's tensors that hold the samples ``index`` of ``side`` (row ``k`` is index
        ``start + k``; the subtraction is skipped where ``start`` is 0, one operator less per call)."""
        start, _ = self.range(side)
        index = index.to(self.device)
        return index if start == 0 else index - start

    # -- the global batch across processes ----------------------------------------------------

    def read_rows(self, index: Mapping[str, Tensor], shard: Shard | None) -> dict[str, dict[str, Tensor]]:
        """Every field of the samples ``index[side]`` (the global batch's positions), by side, on the indices'
        device. With a ``shard`` each process contributes the rows it holds and one all-reduce (a sum: every
        other process adds zeros) hands them to all."""
        if shard is None:
            # Clamped to the rows held: a call reads the state before its index check is read (host_reads), and a
            # row outside the tensor would be a device-side fault on a GPU rather than the check's error.
            clamped = {side: positions.clamp(0, self.sizes[side] - 1) for side, positions in index.items()}
            return {side: {f: self.gather(f, side, rows) for f in self.initial} for side, rows in clamped.items()}
        pieces, device = [], next(iter(index.values())).device
        for side, positions in index.items():
            start, stop = self.range(side)
            # No boolean mask: its selection's size would make the host wait for the device.
            mine = (positions >= start) & (positions < stop)
            local = (positions - start).clamp(0, max(stop - start - 1, 0)).to(self.device)
            for field in self.initial:
                held = self.tensors[field, side]
                values = torch.zeros(positions.shape[0], dtype=self.dtype, device=device)
                if held.shape[0]:
                    values = torch.where(mine, held[local].to(device, self.dtype), values)
                pieces.append(values)
        summed = shard.all_reduce(torch.stack(pieces), kind="state rows")
        fields = list(self.initial)
        return {
            side: {field: summed[number * len(fields) + k] for k, field in enumerate(fields)}
            for number, side in enumerate(index)
        }

    def write_rows(
        self, updates: Updates, shard: Shard | None, *, checked: bool = False, refuse_on_device: bool = False
    ) -> Updates:
        """Write every process's ``updates`` where they belong. With a ``shard``, every update holds one row per
        pair of this process (as the objectives' do), and one all-gather of those rows, each pair's positions
        and values side by side, hands each process the updates of all; each writes those of the rows it holds,
        all or none. Returns every process's updates (this process's alone without a ``shard``). ``checked`` and
        ``refuse_on_device``: as for :meth:`scatter` (the refusal left in :attr:`refused`), with a ``shard`` decided
        on every process's updates, so that all refuse or none."""
        if shard is None:
            self.refused = self.scatter(updates, checked=checked, refuse_on_device=refuse_on_device)
            return updates
        columns = [part.double() for _, _, index, values in updates for part in (index, values)]
        if any(column.shape != (shard.local_size,) for column in columns):
            raise ValueError(f"write_rows takes updates of one row per pair of this process, {shard.local_size}")
        everyone = shard.gather(torch.stack(columns, dim=1), kind="state rows")
        gathered, mine = [], []
        for k, (field, side, _, values) in enumerate(updates):
            positions, new = everyone[:, 2 * k].long(), everyone[:, 2 * k + 1].to(values.dtype)
            gathered.append((field, side, positions, new))
            mine.append((field, side, *self._held(field, side, positions, new)))
        everyone_ok = self._updates_finite(gathered) if refuse_on_device else None
        self.refused = self.scatter(mine, ok=everyone_ok, refuse_on_device=refuse_on_device)
        return gathered

    def _held(self, field: str, side: str, positions: Tensor, values: Tensor) -> tuple[Tensor, Tensor]:
        """The updates of ``positions`` to ``values`` that fall in this process's rows, without a boolean mask
        (its selection's size would make the host wait): an update of a row held elsewhere becomes a repeat of
        one held here (its row, its value), or, where none is held here, a rewrite of this process's first row
        with the value it holds. Repeats write one value, so their order does not matter."""
        target = self.tensors[field, side]
        start, stop = self.range(side)
        values = values.to(target.device, target.dtype)
        if stop == start:
            return positions[:0], values[:0]
        held = (positions >= start) & (positions < stop)
        first = held.to(torch.uint8).argmax().reshape(1)  # indexing with a 0-d tensor would read it
        some = held.any()
        spare_position = torch.where(some, positions.index_select(0, first), start)
        spare_value = torch.where(some.to(target.device), values.index_select(0, first.to(values.device)), target[:1])
        return torch.where(held, positions, spare_position), torch.where(held.to(target.device), values, spare_value)

    def largest(self, field: str, side: str) -> float:
        """The largest value of ``field`` over all of ``side``'s samples, on every process."""
        values = self.tensors[field, side]
        value = float(values.max()) if values.numel() else -math.inf
        if self.world_size > 1:
            value = largest(value, self.group)
        return value

    # -- undoing a step ------------------------------------------------------------------------

    def start_journal(self) -> None:
        """Keep what the following writes replace (rows and scalars), until the next call, for :meth:`undo`."""
        self._journal = [dict(self.scalars)]

    def undo(self) -> None:
        """Put back the rows and scalars written since :meth:`start_journal` (nothing if it was not called)."""
        if not self._journal:
            return
        scalars, *rows = self._journal
        with torch.no_grad():
            for target, index, old in reversed(rows):
                target[index] = old
        self.scalars = dict(scalars)
        self._journal = [dict(self.scalars)]

    # -- saving ---------------------------------------------------------------------------------

    def _bounded(self, field: str, values: Tensor) -> Tensor:
        """``values`` where ``field`` may hold ``-inf`` (it starts there), else their magnitudes: below ``inf``
        exactly where ``field`` may hold them (NaN compares false)."""
        return values if self.initial[field] == -math.inf else values.abs()

    def _check_values(self, field: str, values: Tensor, what: str) -> None:
        if not bool((self._bounded(field, values) < math.inf).all()):
            raise ValueError(f"{what} contain NaN or inf; the state was left unchanged")

    def scalar_values(self) -> dict[str, float]:
        """:attr:`scalars` as numbers, a 0-d tensor on the device read (for saving and reports, not per step)."""
        return {name: float(value) for name, value in self.scalars.items()}

    def get_extra_state(self) -> dict:
        return {
            "sizes": dict(self.sizes),
            "ranges": {side: list(self.range(side)) for side in self.sizes},
            "tensors": {f"{field}/{side}": tensor for (field, side), tensor in self.tensors.items()},
            "scalars": self.scalar_values(),
        }

    def set_extra_state(self, state: dict) -> None:
        """Load rows saved by :meth:`get_extra_state` whose ranges cover this process's (state saved before the
        partition, without ranges, holds every row)."""
        if state["sizes"] != self.sizes:
            raise ValueError(
                f"the saved state is for dataset sizes {state['sizes']}, this objective has {self.sizes}: "
                "num_samples must match the checkpoint's dataset"
            )
        expected = {f"{field}/{side}" for field in self.initial for side in self.sizes}
        if set(state["tensors"]) != expected or set(state["scalars"]) != set(self.scalars):
            raise ValueError(
                f"the saved state holds {sorted(state['tensors'])} and scalars {sorted(state['scalars'])}, "
                f"this objective needs {sorted(expected)} and {sorted(self.scalars)}"
            )
        ranges = state.get("ranges") or {side: [0, size] for side, size in self.sizes.items()}
        tensors = {}
        for key, tensor in state["tensors"].items():
            field, side = key.split("/")
            (saved_start, saved_stop), (start, stop) = ranges[side], self.range(side)
            if tensor.ndim != 1 or tensor.shape[0] != saved_stop - saved_start:
                raise ValueError(
                    f"the saved {field} rows of side {side!r} are {tuple(tensor.shape)}, their range "
                    f"[{saved_start}, {saved_stop}) holds {saved_stop - saved_start}"
                )
            if not saved_start <= start <= stop <= saved_stop:
                raise ValueError(
                    f"the saved rows of side {side!r} are the indices [{saved_start}, {saved_stop}); process "
                    f"{self.rank} of {self.world_size} holds [{start}, {stop}), which they do not cover"
                )
            rows = tensor[start - saved_start : stop - saved_start]
            self._check_values(field, rows, f"the saved {field} values for side {side!r}")
            tensors[field, side] = rows
        if not all(math.isfinite(value) for value in state["scalars"].values()):
            raise ValueError(f"the saved scalars {state['scalars']} must be finite")
        if self.follow_dtype:
            self._dtype = next(iter(state["tensors"].values())).dtype
        self.tensors = {key: tensor.detach().to(self.device, self.dtype).clone() for key, tensor in tensors.items()}
        self.scalars = dict(state["scalars"])

    def saved_ranks(self, saved_world_size: int) -> list[int]:
        """The processes of a run saved by ``saved_world_size`` whose rows this process needs (overlapping its
        range on some side; the first alone where it holds none), in order."""
        needed = set()
        for side, size in self.sizes.items():
            start, stop = self.range(side)
            for rank in range(saved_world_size):
                saved_start, saved_stop = owned_range(size, rank, saved_world_size)
                if saved_start < stop and start < saved_stop:
                    needed.add(rank)
        return list(range(min(needed), max(needed) + 1)) if needed else [0]

    def merged_extra_state(self, states: Mapping[int, dict], saved_world_size: int) -> dict:
        """One extra state from those of consecutive processes of a run saved by ``saved_world_size``.

        Checks that each holds its rank's range (:func:`owned_range`) of this
        store's sizes and that their scalars agree; raises ``ValueError``
        naming the process and what it holds otherwise.
        """
        ranks = sorted(states)
        if ranks != list(range(ranks[0], ranks[-1] + 1)):
            raise ValueError(f"the states of consecutive processes are needed, got those of processes {ranks}")
        first = states[ranks[0]]
        for rank in ranks:
            state = states[rank]
            if state["sizes"] != self.sizes:
                raise ValueError(
                    f"the state of process {rank} of {saved_world_size} is for dataset sizes {state['sizes']}, this "
                    f"objective has {self.sizes}: num_samples must match the checkpoint's dataset"
                )
            for side, size in self.sizes.items():
                expected = list(owned_range(size, rank, saved_world_size))
                found = (state.get("ranges") or {}).get(side)
                if found is None or list(found) != expected:
                    raise ValueError(
                        f"the state of process {rank} of {saved_world_size} holds the indices {found} of side "
                        f"{side!r}; process {rank} of {saved_world_size} holds {expected}"
                    )
            if state["scalars"] != first["scalars"]:
                raise ValueError(
                    f"the state of process {rank} of {saved_world_size} has the scalars {state['scalars']}, process "
                    f"{ranks[0]} {first['scalars']}: the processes disagree"
                )
        return {
            "sizes": dict(self.sizes),
            "ranges": {
                side: [
                    owned_range(size, ranks[0], saved_world_size)[0],
                    owned_range(size, ranks[-1], saved_world_size)[1],
                ]
                for side, size in self.sizes.items()
            },
            "tensors": {key: torch.cat([states[rank]["tensors"][key] for rank in ranks]) for key in first["tensors"]},
            "scalars": dict(first["scalars"]),
        }

    def extra_repr(self) -> str:
        fields = ", ".join(self.initial)
        where = "" if self.world_size == 1 else f" (process {self.rank} of {self.world_size}'s rows)"
        return f"sizes={self.sizes}, fields=({fields}), {self.memory_bytes() / 2**20:.1f} MiB on {self.device}{where}"
