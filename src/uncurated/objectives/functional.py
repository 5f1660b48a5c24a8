"""The functional twins of every objective: ``infonce(a, b, temperature=...)`` and so on."""

from .clip_reg import clip_reg, negative_pair_regularizer, positive_pair_regularizer
from .cyclip import crossmodal_consistency, cyclip, inmodal_consistency
from .dcl import dcl
from .hcl import hcl
from .infonce import infonce
from .rince import rince
from .siglip import siglip

__all__ = [
    "clip_reg",
    "crossmodal_consistency",
    "cyclip",
    "dcl",
    "hcl",
    "infonce",
    "inmodal_consistency",
    "negative_pair_regularizer",
    "positive_pair_regularizer",
    "rince",
    "siglip",
]
