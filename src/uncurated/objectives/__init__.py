"""Contrastive objectives, each an ``nn.Module`` with a functional twin, built on one engine.

Build any objective by name::

    from uncurated import objectives
    loss = objectives.build("hcl", beta=0.5, tau_plus=0.1)
    value = loss(z1, z2)

:func:`available` lists every name with its parameters and defaults; the
engine behind them is :mod:`uncurated.objectives.engine`.
"""

from __future__ import annotations

from dataclasses import dataclass

from . import functional, schedules
from .base import ContrastiveObjective
from .clip_reg import CLIPRegularized
from .cyclip import CyCLIP
from .dcl import DCL
from .engine import ScoreMatrix
from .hcl import HCL
from .infonce import InfoNCE
from .rince import RINCE
from .siglip import SigLIP
from .temperature import Temperature

OBJECTIVES: dict[str, type[ContrastiveObjective]] = {
    cls.name: cls for cls in (InfoNCE, SigLIP, CyCLIP, DCL, HCL, RINCE, CLIPRegularized)
}


@dataclass(frozen=True)
class ObjectiveSpec:
    """One objective as listed by :func:`available`: its name, class, summary and defaults."""

    name: str
    cls: type[ContrastiveObjective]
    summary: str
    defaults: dict[str, object]


def available() -> list[ObjectiveSpec]:
    """Every objective :func:`build` knows, with the first line of its docstring and its defaults."""
    return [
        ObjectiveSpec(name, cls, (cls.__doc__ or "").strip().splitlines()[0], cls.defaults())
        for name, cls in OBJECTIVES.items()
    ]


def build(name: str, **params) -> ContrastiveObjective:
    """The objective called ``name`` (see :func:`available`) with ``params`` overriding its defaults.

    Raises ``ValueError`` for an unknown name or parameter, naming the accepted ones.
    """
    if name not in OBJECTIVES:
        raise ValueError(f"unknown objective {name!r}; available: {', '.join(OBJECTIVES)}")
    cls = OBJECTIVES[name]
    accepted = cls.defaults()
    unknown = sorted(set(params) - set(accepted))
    if unknown:
        raise ValueError(
            f"{name} does not take parameter(s) {', '.join(unknown)}; it takes: {', '.join(accepted)}"
        )
    return cls(**params)


__all__ = [
    "CLIPRegularized",
    "ContrastiveObjective",
    "CyCLIP",
    "DCL",
    "HCL",
    "InfoNCE",
    "OBJECTIVES",
    "ObjectiveSpec",
    "RINCE",
    "ScoreMatrix",
    "SigLIP",
    "Temperature",
    "available",
    "build",
    "functional",
    "schedules",
]
