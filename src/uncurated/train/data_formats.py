"""Data formats: each registers its name, its own keys and its builder once (:func:`register_format`), and the
run builds its data from the format the ``dataset`` key names. Imports nothing of torch: the configuration checks
``dataset`` against :func:`format_names` and ``--help`` lists them.

A new format is one module: its dataset (which :class:`~uncurated.data.base.IndexedDataset` or
:class:`~uncurated.data.base.StreamedDataset` describes, checked when it is built), the :class:`Section` of its own
keys (set as ``dataset.NAME=VALUE``, checked when the configuration is built), and a call of
:func:`register_format`. The module must be imported before the configuration is read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .registry import Registry
from .setting import NoOptions, Section

#: ``build(config, options)``: the training split and the labelled test split (or ``None``) of a run's
#: configuration (a :class:`~uncurated.train.config.TrainConfig`) and the format's own keys (its section).
Build = Callable[[Any, Any], tuple[Any, Any]]


@dataclass(frozen=True)
class DataFormat:
    """A format the ``dataset`` key names: its ``build``; whether its data is held in memory with a labelled test
    split (``in_memory``: ``train_subset``, ``data_on_device`` and the probes' test split apply); the ``pipeline``
    and ``augment`` a run on it starts from when the preset was written for another dataset; the section of its
    own keys (``options``, set as ``dataset.NAME=VALUE``)."""

    name: str
    build: Build
    in_memory: bool = False
    pipeline: str = "two_view"
    augment: str = "none"
    options: type[Section] = NoOptions


#: Every registered data format, the built-in ones first (:mod:`.builtin_formats`).
FORMATS: Registry[DataFormat] = Registry("data format")
#: ``register_format(data_format)``: registers it under its name; a name registered twice is refused, naming both
#: builders.
register_format = FORMATS.register
#: The names the ``dataset`` key accepts.
format_names = FORMATS.names
