"""Package attributes imported on first use, so that importing a package costs only what is used.

``uncurated --help`` imports the command modules, which read a few constants of the library's packages
(presets, configuration keys, toy defaults); a package whose ``__init__`` imported every submodule would load
torch for them. A package lists its public names and their submodules instead::

    __getattr__, __dir__ = lazy_exports(__name__, {"load_config": ".config", "train": ".run"})

``from uncurated.train import load_config`` then imports ``uncurated.train.config`` only.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Callable


def lazy_exports(package: str, exports: dict[str, str]) -> tuple[Callable[[str], object], Callable[[], list[str]]]:
    """The module ``__getattr__`` and ``__dir__`` of ``package``, which exports ``name`` from ``exports[name]``."""

    def __getattr__(name: str) -> object:
        if name not in exports:
            raise AttributeError(f"module {package!r} has no attribute {name!r}")
        value = getattr(importlib.import_module(exports[name], package), name)
        setattr(sys.modules[package], name, value)  # found directly from now on
        return value

    def __dir__() -> list[str]:
        return sorted(set(exports) | set(vars(sys.modules[package])))

    return __getattr__, __dir__
