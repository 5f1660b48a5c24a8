"""Checkpoints that are never half-written: a folder per checkpoint, published by one rename.

A checkpoint is a folder ``step-XXXXXXXX`` in the run's ``checkpoints/``
holding ``model.safetensors`` (the weights, loadable without this package)
and ``state.pt`` (optimizer, schedule, objective state, random generators,
data position, and any non-tensor module state such as a tokenizer's). It is written into a temporary folder first and renamed into
place, and ``checkpoints/latest`` (a one-line file naming the newest folder)
is replaced atomically afterwards, so a crash at any moment leaves the
previous checkpoint valid. The oldest checkpoints beyond ``keep`` are removed
only after the new one is in place.
"""

from __future__ import annotations

import os
import shutil
import tempfile
from pathlib import Path
from typing import Any

import torch
from safetensors.torch import load_file, save_file
from torch import nn

LATEST = "latest"
MODEL_EXTRA = "model_extra_state"
WEIGHTS = "model.safetensors"
STATE = "state.pt"


def save_checkpoint(directory: Path, step: int, model: nn.Module, state: dict[str, Any], *, keep: int = 2) -> Path:
    """Write ``model``'s weights and ``state`` as the checkpoint of ``step``; return its folder."""
    directory.mkdir(parents=True, exist_ok=True)
    final = directory / f"step-{step:08d}"
    staging = Path(tempfile.mkdtemp(prefix=f".{final.name}-", dir=directory))
    try:
        weights, extra = {}, {}
        for name, value in model.state_dict().items():
            if isinstance(value, torch.Tensor):
                weights[name] = value.detach().cpu().contiguous()
            else:
                extra[name] = value
        save_file(weights, staging / WEIGHTS)
        torch.save({**state, MODEL_EXTRA: extra}, staging / STATE)
        _fsync_folder(staging)
        if final.exists():
            shutil.rmtree(final)
        os.replace(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    _write_atomically(directory / LATEST, final.name + "\n")
    _prune(directory, keep)
    return final


def latest_checkpoint(directory: Path) -> Path | None:
    """The folder ``checkpoints/latest`` names, or ``None`` if the run has none yet."""
    pointer = directory / LATEST
    if not pointer.is_file():
        return None
    folder = directory / pointer.read_text().strip()
    if not (folder / WEIGHTS).is_file() or not (folder / STATE).is_file():
        raise FileNotFoundError(f"{pointer} names {folder}, which is missing or incomplete")
    return folder


def load_checkpoint(folder: Path, model: nn.Module) -> dict[str, Any]:
    """Load the weights of ``folder`` into ``model`` (strictly) and return its training state."""
    state = torch.load(folder / STATE, map_location="cpu", weights_only=False)
    model.load_state_dict({**load_file(folder / WEIGHTS), **state.pop(MODEL_EXTRA)}, strict=True)
    return state


def _write_atomically(path: Path, text: str) -> None:
    handle, temporary = tempfile.mkstemp(prefix=f".{path.name}-", dir=path.parent)
    try:
        with os.fdopen(handle, "w") as file:
            file.write(text)
            file.flush()
            os.fsync(file.fileno())
        os.replace(temporary, path)
    except BaseException:
        Path(temporary).unlink(missing_ok=True)
        raise


def _fsync_folder(folder: Path) -> None:
    for path in folder.iterdir():
        with open(path, "rb") as file:
            os.fsync(file.fileno())


def _prune(directory: Path, keep: int) -> None:
    folders = sorted(path for path in directory.glob("step-*") if path.is_dir())
    for old in folders[: max(len(folders) - keep, 0)]:
        shutil.rmtree(old, ignore_errors=True)
