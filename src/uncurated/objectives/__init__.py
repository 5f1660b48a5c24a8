"""Contrastive objectives: ``nn.Module`` s on one base and one engine, the batch ones with functional twins.

Build any objective by name::

    from uncurated import objectives
    loss = objectives.build("hcl", beta=0.5, tau_plus=0.1)
    value = loss(z1, z2)
    nuclr = objectives.build("nuclr", num_samples=len(dataset))   # a global objective
    value = nuclr(z1, z2, index=batch_indices)

:func:`available` lists every name with its parameters and defaults, :data:`ALIASES` the names
``clip`` and ``simclr`` (InfoNCE with its two pairings) that :func:`build` takes too; the
engine behind them is :mod:`uncurated.objectives.engine`. The global
objectives (``sogclr``, ``isogclr``, ``nuclr``) keep per-sample state and take
each pair's dataset position at call time (:mod:`uncurated.objectives.stateful`).
Every objective is an :class:`Objective` and is called alike,
``objective(a, b, index=..., labels=...)`` (:mod:`uncurated.objectives.base`), and the batch ones
take open_clip's call form too, ``objective(image_features, text_features, logit_scale[, logit_bias],
output_dict=False)`` (:mod:`uncurated.objectives.call_form`).
"""

from __future__ import annotations

from dataclasses import dataclass

from ..objective_aliases import OBJECTIVE_ALIASES as ALIASES
from ..objective_aliases import resolve_alias
from ..references import REFERENCES, Reference
from . import functional, schedules
from .base import REQUIRED, ContrastiveObjective, Objective
from .clip_reg import CLIPRegularized
from .cyclip import CyCLIP
from .dcl import DCL
from .engine import ScoreMatrix
from .hcl import HCL
from .infonce import InfoNCE
from .isogclr import ISogCLR
from .nuclr import NUCLR
from .rince import RINCE
from .row_statistics import RowStatistics
from .siglip import SigLIP
from .sogclr import SogCLR
from .stateful import StatefulObjective
from .temperature import Temperature

OBJECTIVES: dict[str, type[Objective]] = {
    cls.name: cls for cls in (InfoNCE, SigLIP, CyCLIP, DCL, HCL, RINCE, CLIPRegularized, SogCLR, ISogCLR, NUCLR)
}


@dataclass(frozen=True)
class ObjectiveSpec:
    """One objective as listed by :func:`available`: its name, class, summary, defaults and papers."""

    name: str
    cls: type[Objective]
    summary: str
    defaults: dict[str, object]

    @property
    def papers(self) -> list[Reference]:
        """The objective's papers (:mod:`uncurated.references`), its own first."""
        return [REFERENCES[key] for key in self.cls.papers]

    @property
    def stateful(self) -> bool:
        """Whether the objective keeps per-sample state (and takes ``index=`` at call time)."""
        return issubclass(self.cls, StatefulObjective)


def available() -> list[ObjectiveSpec]:
    """Every objective :func:`build` knows, with the first line of its docstring, its defaults and its papers."""
    return [
        ObjectiveSpec(name, cls, (cls.__doc__ or "").strip().splitlines()[0], cls.defaults())
        for name, cls in OBJECTIVES.items()
    ]


def build(name: str, **params) -> Objective:
    """The objective called ``name`` (see :func:`available`, or an alias of :data:`ALIASES`: ``clip``, ``simclr``)
    with ``params`` overriding its defaults.

    Raises ``ValueError`` for an unknown name or parameter, a parameter that
    contradicts the alias's, or a missing required one (``num_samples`` of the
    global objectives), naming the accepted ones.
    """
    registered, implied = resolve_alias(name)
    if registered not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; available: {', '.join([*OBJECTIVES, *ALIASES])}")
    for key, value in implied.items():
        if params.get(key, value) != value:
            raise ValueError(
                f"{name} is {registered} with {key}={value!r}, got {key}={params[key]!r}; "
                f"build {registered!r} to choose the {key}"
            )
    params = {**implied, **params}
    name, cls = registered, OBJECTIVES[registered]
    accepted = cls.defaults()
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(f"{name} does not take parameter(s) {', '.join(unknown)}; it takes: {', '.join(accepted)}")
    missing = [key for key, default in accepted.items() if default is REQUIRED and key not in params]
    if missing:
        raise ValueError(f"{name} needs parameter(s) {', '.join(missing)}")
    return cls(**params)


__all__ = [
    "ALIASES",
    "CLIPRegularized",
    "ContrastiveObjective",
    "CyCLIP",
    "DCL",
    "HCL",
    "ISogCLR",
    "InfoNCE",
    "NUCLR",
    "OBJECTIVES",
    "Objective",
    "ObjectiveSpec",
    "RINCE",
    "RowStatistics",
    "ScoreMatrix",
    "SigLIP",
    "SogCLR",
    "StatefulObjective",
    "Temperature",
    "available",
    "build",
    "functional",
    "schedules",
]
