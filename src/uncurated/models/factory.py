"""Encoders named by a string: ``hf:SOURCE`` (``transformers``) and ``python:package.module:factory`` (yours).

``python:`` imports a module and calls a function of it, which runs that
module's code: it is an explicit opt-in of whoever writes the configuration.
A run folder someone else wrote is read with such encoders refused unless
asked for (``uncurated eval --trust-python-encoders``, ``load_run(...,
trust_python_encoders=True)``).
"""

from __future__ import annotations

import importlib
from collections.abc import Callable

from ..model_defaults import ENCODER_PREFIXES as PREFIXES


def split_source(value: str) -> tuple[str, str]:
    """``("hf", SOURCE)``, ``("python", "module:function")`` or ``("builtin", value)`` for an encoder name."""
    for prefix in PREFIXES:
        if value.startswith(prefix):
            target = value.removeprefix(prefix)
            if not target:
                raise ValueError(f"{value!r} names no {prefix.rstrip(':')} encoder after the colon")
            return prefix.rstrip(":"), target
    return "builtin", value


def load_factory(key: str, target: str) -> Callable:
    """The function ``module:function`` names (``module`` importable, dotted); ``ValueError`` naming ``key``."""
    module_name, colon, function_name = target.partition(":")
    if not colon or not module_name or not function_name:
        raise ValueError(f"{key}=python:{target} must have the form python:package.module:function")
    try:
        module = importlib.import_module(module_name)
    except ImportError as error:
        raise ValueError(f"{key}=python:{target}: cannot import {module_name} ({error})") from error
    factory = getattr(module, function_name, None)
    if not callable(factory):
        raise ValueError(f"{key}=python:{target}: {module_name} has no function {function_name}")
    return factory
