"""A store of per-sample tensors, indexed by each pair's persistent position in the dataset.

The global objectives of Wang et al. 2025 (SogCLR, iSogCLR, NUCLR) keep a few numbers
per training sample: moving averages ``u``, popularities ``zeta``, individual
temperatures and their optimizer moments. :class:`SampleState` holds them as
tensors of length ``n`` for each *side* of the pairs (``"a"``, the first
argument of the objective, e.g. images; ``"b"``, the second, e.g. texts),
gathers the rows of a batch and writes them back.

Memory: ``4 n (fields per side) (sides)`` bytes in float32; e.g. NUCLR's three
fields on both sides of 12 million pairs take 288 MB. With
``device="cpu"`` the tensors stay in host memory and only the batch's rows
travel to the training device (Wang et al. 2025, App. F.1).
"""

from __future__ import annotations

import math
from collections.abc import Mapping

import torch
from torch import Tensor, nn

from ..precision import statistics_dtype

SIDES = ("a", "b")


class SampleState(nn.Module):
    """Per-sample tensors ``fields`` for ``sizes[side]`` samples on each side.

    Args:
        sizes: the number of samples on each side, e.g. ``{"a": n, "b": n}``.
        fields: the initial value of each field (the same on every side).
            A field initialised at ``-inf`` (a log-domain value not yet set)
            may hold ``-inf``; every other value must be finite.
        scalars: named scalar values kept with the state (e.g. NUCLR's ``xi``).
        device: where the tensors live. ``None`` follows the features: the
            state moves to the device of the first batch it serves.
        dtype: the floating-point type of the fields. ``None`` follows the
            features' type at the first batch, at least float32 (half-precision
            features keep float32 state: the precision contract of
            :mod:`uncurated.precision`).

    The state is saved through ``state_dict()`` (as the module's extra state,
    so ``.to()`` never moves it) and restored by ``load_state_dict()``, which
    checks the sizes, the fields and that the values are finite.
    """

    def __init__(
        self,
        sizes: Mapping[str, int],
        fields: Mapping[str, float],
        *,
        scalars: Mapping[str, float] | None = None,
        device: torch.device | str | None = None,
        dtype: torch.dtype | None = None,
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
        self.scalars = {name: float(value) for name, value in (scalars or {}).items()}

    @property
    def tensors(self) -> dict[tuple[str, str], Tensor]:
        """The per-sample tensors by ``(field, side)``, created at their initial values on first use."""
        if self._tensors is None:
            self._tensors = {
                (field, side): torch.full((size,), value, dtype=self._dtype, device=self._device)
                for field, value in self.initial.items()
                for side, size in self.sizes.items()
            }
        return self._tensors

    @tensors.setter
    def tensors(self, tensors: dict[tuple[str, str], Tensor]) -> None:
        self._tensors = tensors

    @property
    def device(self) -> torch.device:
        return self._device

    def memory_bytes(self) -> int:
        """The memory the per-sample tensors take."""
        return sum(tensor.numel() * tensor.element_size() for tensor in self.tensors.values())

    def check_index(self, side: str, index: Tensor, name: str = "index") -> None:
        """Check a batch's dataset indices for ``side``: integers in [0, n), no repeats."""
        size = self.sizes[side]
        if not isinstance(index, Tensor) or index.ndim != 1 or index.is_floating_point() or index.is_complex():
            raise ValueError(f"{name} must be a 1-D integer tensor of dataset positions, got {index!r:.80}")
        if index.numel() and (int(index.min()) < 0 or int(index.max()) >= size):
            bad = int(index[(index < 0) | (index >= size)][0])
            raise ValueError(f"{name} must be in [0, {size}) (the dataset size given at construction), got {bad}")
        if torch.unique(index).numel() != index.numel():
            raise ValueError(f"{name} must not repeat a sample within a batch (the state update needs one row each)")

    @property
    def dtype(self) -> torch.dtype:
        return self._dtype

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

    def gather(self, field: str, side: str, index: Tensor) -> Tensor:
        """The values of ``field`` for the samples ``index`` of ``side``, on ``index``'s device.

        State kept on the host for a batch on a CUDA device travels through pinned memory, so that its copy
        runs asynchronously (``non_blocking``).
        """
        rows = self.tensors[field, side][index.to(self.device)]
        if rows.device.type == "cpu" and index.device.type == "cuda":
            rows = rows.pin_memory()
        return rows.to(index.device, non_blocking=True)

    def scatter(self, updates: list[tuple[str, str, Tensor, Tensor]]) -> None:
        """Write ``(field, side, index, values)`` updates, all or none.

        Every update is checked first (finite, or ``-inf`` where the field
        allows it); a bad one raises ``ValueError`` before anything is written.
        """
        for field, side, _, values in updates:
            self._check_values(field, values, f"new {field} values for side {side!r}")
        with torch.no_grad():
            for field, side, index, values in updates:
                target = self.tensors[field, side]
                target[index.to(target.device)] = values.detach().to(target.device, target.dtype)

    def _check_values(self, field: str, values: Tensor, what: str) -> None:
        allowed = values.isfinite()
        if self.initial[field] == -math.inf:
            allowed |= values == -math.inf
        if not bool(allowed.all()):
            raise ValueError(f"{what} contain NaN or inf; the state was left unchanged")

    def get_extra_state(self) -> dict:
        return {
            "sizes": dict(self.sizes),
            "tensors": {f"{field}/{side}": tensor for (field, side), tensor in self.tensors.items()},
            "scalars": dict(self.scalars),
        }

    def set_extra_state(self, state: dict) -> None:
        if state["sizes"] != self.sizes:
            raise ValueError(
                f"the saved state is for dataset sizes {state['sizes']}, this objective has {self.sizes}: "
                "num_samples must match the checkpoint's dataset"
            )
        expected = {f"{field}/{side}" for field, side in self.tensors}
        if set(state["tensors"]) != expected or set(state["scalars"]) != set(self.scalars):
            raise ValueError(
                f"the saved state holds {sorted(state['tensors'])} and scalars {sorted(state['scalars'])}, "
                f"this objective needs {sorted(expected)} and {sorted(self.scalars)}"
            )
        for key, tensor in state["tensors"].items():
            field, side = key.split("/")
            self._check_values(field, tensor, f"the saved {field} values for side {side!r}")
        if not all(math.isfinite(value) for value in state["scalars"].values()):
            raise ValueError(f"the saved scalars {state['scalars']} must be finite")
        if self.follow_dtype:
            self._dtype = next(iter(state["tensors"].values())).dtype
        self.tensors = {
            tuple(key.split("/")): tensor.detach().to(self.device, self.dtype).clone()
            for key, tensor in state["tensors"].items()
        }
        self.scalars = dict(state["scalars"])

    def extra_repr(self) -> str:
        fields = ", ".join(self.initial)
        return f"sizes={self.sizes}, fields=({fields}), {self.memory_bytes() / 2**20:.1f} MiB on {self.device}"
