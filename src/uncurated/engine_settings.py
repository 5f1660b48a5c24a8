"""The engine's six settings as one checked value, shared by every objective and the training configuration.

Every objective takes them as keywords (``InfoNCE(tiling="always", block_size=256)``), the training configuration
as ``objective.NAME=VALUE`` (``compile=`` too); both hold them as one :class:`EngineSettings`:

* ``tiling``: ``"auto"`` (the default: the Triton kernels for CUDA features they take when triton imports,
  otherwise the dense matrix while its estimated memory fits ``memory_budget``, tiles beyond), ``"always"``,
  ``"never"`` or ``"triton"`` (the kernels; ``pip install 'uncurated[triton]'``);
* ``block_size``: the side of the tiles, an integer >= 1 (``None``: chosen from the batch, the dimension and the
  budget); with ``"triton"`` the kernels' block, a power of two in [16, 256];
* ``memory_budget``: bytes for the score-matrix work, an integer >= 1 MiB (``None``: the tile policy's);
* ``tile_policy``: ``"auto"`` (follow the features' device), ``"cpu"`` or ``"cuda"``;
* ``compile``: run each tile's elementwise work through ``torch.compile`` (``None``: on CUDA where Triton is
  installed);
* ``distributed``: how a call under ``torch.distributed`` is read (``None``: each process passes its own pairs when
  a process group of several is initialized; ``False``: every call is a whole batch; ``True``: require a group).

:mod:`uncurated.objectives.tiled.policy` reads the first five (what they cost, per device), the process module the
last. Each field is declared with its check; nothing here imports torch, so the configuration checks them when it
is loaded.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

from .checks import check_choice, check_integer, did_you_mean

TILING_MODES = ("auto", "always", "never", "triton")
TILE_POLICIES = ("auto", "cpu", "cuda")
MIN_MEMORY_BUDGET = 2**20


def _choice(default: str, choices: tuple[str, ...]) -> Any:
    return field(default=default, metadata={"check": lambda name, value: check_choice(name, value, choices)})


def _integer(low: int) -> Any:
    def check(name: str, value: int | None) -> None:
        if value is not None:
            check_integer(name, value, low)

    return field(default=None, metadata={"check": check})


def _switch(meaning_of_none: str) -> Any:
    def check(name: str, value: bool | None) -> None:
        if value is not None and not isinstance(value, bool):
            raise ValueError(f"{name} must be true, false or None ({meaning_of_none}), got {value!r}")

    return field(default=None, metadata={"check": check})


@dataclass(frozen=True)
class EngineSettings:
    """How an objective's score matrix is computed and read across processes; see the module docstring.

    Raises ``ValueError`` naming the setting and its accepted values when one is out of range.
    """

    tiling: str = _choice("auto", TILING_MODES)
    block_size: int | None = _integer(1)
    memory_budget: int | None = _integer(MIN_MEMORY_BUDGET)
    tile_policy: str = _choice("auto", TILE_POLICIES)
    compile: bool | None = _switch("compile on CUDA")
    distributed: bool | None = _switch("follow the process group when there is one")

    def __post_init__(self) -> None:
        for setting in dataclasses.fields(self):
            check: Callable[[str, Any], object] = setting.metadata["check"]
            check(setting.name, getattr(self, setting.name))

    @classmethod
    def of(cls, keywords: Mapping[str, Any], owner: str) -> EngineSettings:
        """The settings of an objective's engine keywords; ``TypeError`` naming ``owner`` for a keyword that is
        none of them (with the closest setting), as for any unexpected keyword."""
        for name in keywords:
            if name not in NAMES:
                raise TypeError(
                    f"{owner}() got an unexpected keyword argument {name!r}{did_you_mean(name, NAMES)}; beyond its "
                    f"own parameters it takes the engine's settings {', '.join(NAMES)}"
                )
        return cls(**keywords)

    def keywords(self) -> dict[str, Any]:
        """The settings as an objective's keywords."""
        return dataclasses.asdict(self)

    def changed(self) -> dict[str, Any]:
        """The settings that differ from their defaults, by name."""
        return {name: value for name, value in self.keywords().items() if value != getattr(DEFAULT, name)}


DEFAULT = EngineSettings()
NAMES = tuple(setting.name for setting in dataclasses.fields(EngineSettings))
"""The settings' names, the keywords every objective takes for them."""
