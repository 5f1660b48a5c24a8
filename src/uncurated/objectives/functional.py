"""The functional twins of the batch objectives: ``infonce(a, b, temperature=...)`` and so on.

Each twin is made from its class, so that every default lives in one place
(the class): ``dcl(a, b, **parameters)`` is ``DCL(**parameters)`` evaluated
once, except that ``temperature`` (and SigLIP's ``bias``) may be a tensor
autograd follows, and nothing is learnable.
"""

from __future__ import annotations

import inspect
from collections.abc import Callable

from torch import Tensor

from .base import ContrastiveObjective
from .clip_reg import CLIPRegularized, negative_pair_regularizer, positive_pair_regularizer
from .cyclip import CyCLIP, crossmodal_consistency, inmodal_consistency
from .dcl import DCL
from .hcl import HCL
from .infonce import InfoNCE
from .rince import RINCE
from .siglip import SigLIP

NOT_FUNCTIONAL = ("learnable", "temperature_parametrization")
"""Constructor parameters a twin does not take: a function learns nothing."""


def functional_twin(cls: type[ContrastiveObjective]) -> Callable[..., Tensor]:
    """``name(a, b, *, temperature=..., <cls's parameters>, <cls's call inputs>)``: :class:`cls` as a function."""
    defaults = {key: value for key, value in cls.defaults().items() if key not in NOT_FUNCTIONAL}

    default_temperature = defaults["temperature"]
    if not isinstance(default_temperature, float):
        raise TypeError(f"{cls.__name__}'s default temperature must be a float, got {default_temperature!r}")

    def twin(a: Tensor, b: Tensor, *, temperature: float | Tensor | None = None, **arguments) -> Tensor:
        inputs = {key: arguments.pop(key) for key in cls.call_inputs if key in arguments}
        objective = cls(learnable=False, **arguments)
        return objective.loss(a, b, temperature=default_temperature if temperature is None else temperature, **inputs)

    parameters = [inspect.Parameter(name, inspect.Parameter.POSITIONAL_OR_KEYWORD) for name in ("a", "b")]
    parameters += [
        inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=value) for key, value in defaults.items()
    ]
    parameters += [inspect.Parameter(key, inspect.Parameter.KEYWORD_ONLY, default=None) for key in cls.call_inputs]
    twin.__signature__ = inspect.Signature(parameters, return_annotation=Tensor)  # type: ignore[attr-defined]  # read by inspect.signature
    twin.__name__ = twin.__qualname__ = cls.name
    twin.__doc__ = (
        f"Functional :class:`~{cls.__module__}.{cls.__name__}`; see there for the equation and the arguments."
    )
    return twin


infonce = functional_twin(InfoNCE)
siglip = functional_twin(SigLIP)
cyclip = functional_twin(CyCLIP)
dcl = functional_twin(DCL)
hcl = functional_twin(HCL)
rince = functional_twin(RINCE)
clip_reg = functional_twin(CLIPRegularized)

__all__ = [
    "clip_reg",
    "crossmodal_consistency",
    "cyclip",
    "dcl",
    "functional_twin",
    "hcl",
    "infonce",
    "inmodal_consistency",
    "negative_pair_regularizer",
    "positive_pair_regularizer",
    "rince",
    "siglip",
]
