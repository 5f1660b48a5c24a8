"""The paths a configuration names, made absolute, so that a run's folder stands alone.

A run read later (``uncurated eval RUN``, ``load_run``, ``resume=true``) from another working folder must find what
its configuration names where training found it: the run keeps its configuration with every path absolute. Which
values are paths: ``data_dir`` (a file, a folder, or webdataset shards, brace patterns included; not a URL),
``zero_shot_dir``, ``retrieval_file`` and ``retrieval_images``; ``preset``, ``zero_shot_classes`` and
``zero_shot_templates`` where they name a file rather than one of the packaged names; an encoder ``hf:FOLDER``
where that folder exists (``hf:ARCHITECTURE`` names none).
"""

from __future__ import annotations

import dataclasses
import os
from typing import Any

from .config import TrainConfig

ALWAYS_PATHS = ("data_dir", "zero_shot_dir", "retrieval_file", "retrieval_images")
"""Keys whose value, when set, is always a path."""
FILE_OR_NAME = ("preset", "zero_shot_classes", "zero_shot_templates")
"""Keys whose value is a packaged name or a file: made absolute where such a file exists."""
FOLDER_ENCODERS = ("image_encoder", "text_encoder")
"""Keys whose ``hf:FOLDER`` value names a folder."""
URL_MARKS = ("://", "pipe:")
"""What marks a ``data_dir`` that is no local path (webdataset reads URLs and commands)."""


def with_absolute_paths(config: TrainConfig) -> TrainConfig:
    """``config`` with each path it names absolute (relative ones are read from the current folder)."""
    changes: dict[str, str] = {}
    for key in ALWAYS_PATHS:
        value = getattr(config, key)
        if value and not any(mark in value for mark in URL_MARKS):
            changes[key] = os.path.abspath(value)
    for key in FILE_OR_NAME:
        value = getattr(config, key)
        if value and os.path.isfile(value):
            changes[key] = os.path.abspath(value)
    for key in FOLDER_ENCODERS:
        kind, _, source = getattr(config, key).partition(":")
        if kind == "hf" and source and os.path.isdir(source):
            changes[key] = f"hf:{os.path.abspath(source)}"
    changed: dict[str, Any] = {key: value for key, value in changes.items() if value != getattr(config, key)}
    return dataclasses.replace(config, **changed) if changed else config
