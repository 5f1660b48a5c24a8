"""Objective names beyond the registry's: ``clip`` and ``simclr``, InfoNCE with its two pairings.

CLIP's loss (Radford et al. 2021) is InfoNCE across two modalities, SimCLR's NT-Xent (Chen et al. 2020) InfoNCE over
two views of one batch; both names build :class:`~uncurated.objectives.InfoNCE` with that pairing, through
:func:`uncurated.objectives.build` as through the training configuration's ``objective=``. Nothing here imports
torch, so the configuration reads the table when it is loaded.
"""

from __future__ import annotations

from typing import Any

OBJECTIVE_ALIASES: dict[str, tuple[str, dict[str, Any]]] = {
    "clip": ("infonce", {"pairing": "cross"}),
    "simclr": ("infonce", {"pairing": "two_view"}),
}
"""Each alias's registry name and the parameters it implies."""


def resolve_alias(objective: str) -> tuple[str, dict[str, Any]]:
    """The registry name of ``objective`` and the parameters its alias implies (none for a plain name)."""
    return OBJECTIVE_ALIASES.get(objective, (objective, {}))
