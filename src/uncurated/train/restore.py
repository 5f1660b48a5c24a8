"""A finished (or interrupted) training run, rebuilt from its folder for evaluation.

``load_run(folder)`` reads the run's ``config.yaml``, rebuilds its datasets,
model and augmentation exactly as training did, and loads the weights of its
latest checkpoint, so that ``uncurated eval`` and ``uncurated bound`` can
measure any run the training pipeline wrote: its ``model.safetensors``, or
the shards a ``parallel=fsdp`` run wrote, read by one process (DCP reshards
them into the whole model, :func:`~uncurated.train.parallel.load_shards`). The objective is rebuilt too,
with its trained state (a learned temperature, per-sample state).
"""

from __future__ import annotations

import pickle
from dataclasses import dataclass
from pathlib import Path

import torch
import yaml
from torch import nn

from ..objectives import Objective
from .builders import TOKENIZER_FILE, Splits, build_augmentation, build_model, build_objective, build_splits
from .checkpoint import (
    MODEL_EXTRA,
    CheckpointError,
    latest_checkpoint,
    load_checkpoint,
    load_objective_state,
    read_training_state,
    sharded_weights,
)
from .config import FIELDS, ConfigError, TrainConfig, with_earlier_values
from .random_state import seed_everything


@dataclass
class RestoredRun:
    """What a run's folder holds, rebuilt: its configuration, data, trained model, objective and augmentation."""

    folder: Path
    config: TrainConfig
    splits: Splits
    model: nn.Module
    objective: Objective
    augment: nn.Module
    checkpoint: Path

    def temperature(self) -> float:
        """The objective's (possibly learned) temperature."""
        return float(self.objective.temperature().detach())


def load_run(
    folder: Path | str, *, device: torch.device | str = "cpu", trust_python_encoders: bool = False
) -> RestoredRun:
    """Rebuild the run in ``folder`` (one with ``config.yaml`` and ``checkpoints/``) on ``device``.

    A run whose encoders are ``python:module:function`` factories is refused
    with :class:`ConfigError` unless ``trust_python_encoders``: rebuilding it
    imports that module, which runs its code.
    """
    folder = Path(folder)
    config = read_run_config(folder)
    factories = [
        f"{key}={value}"
        for key, value in (("image_encoder", config.image_encoder), ("text_encoder", config.text_encoder))
        if value.startswith("python:")
    ]
    if factories and not trust_python_encoders:
        raise ConfigError(
            f"{folder / 'config.yaml'} names {', '.join(factories)}: rebuilding the run imports that module, which "
            "runs its code; pass --trust-python-encoders (uncurated eval) if you trust whoever wrote the run"
        )
    checkpoint = latest_checkpoint(folder / "checkpoints")
    if checkpoint is None:
        raise FileNotFoundError(f"{folder} has no checkpoint yet (checkpoints/latest is missing)")
    seed_everything(config.seed)
    splits = build_splits(config)
    tokenizer_path = folder / TOKENIZER_FILE
    earlier = None if tokenizer_path.is_file() else earlier_tokenizer_of(checkpoint)
    model = build_model(config, splits.train, tokenizer_path=tokenizer_path, tokenizer=earlier)
    objective = build_objective(config, splits.train)
    state = load_weights(checkpoint, model)
    load_objective_state(checkpoint, objective, state)
    model.to(device).eval()
    return RestoredRun(folder, config, splits, model, objective.to(device), build_augmentation(config), checkpoint)


def load_weights(checkpoint: Path, model: nn.Module) -> dict:
    """Verify ``checkpoint``, load its weights into ``model`` (whole, in this process: from ``model.safetensors``
    or from the shards of a ``parallel=fsdp`` run) and return its training state."""
    shards = sharded_weights(checkpoint)
    if shards is None:
        return load_checkpoint(checkpoint, model)
    from .parallel import load_shards

    state = read_training_state(checkpoint)
    try:
        load_shards(shards, model, state.pop(MODEL_EXTRA))
    except (KeyError, TypeError, ValueError, RuntimeError, pickle.UnpicklingError) as error:
        raise CheckpointError(
            f"checkpoint {checkpoint} holds shards this model cannot use ({type(error).__name__}: {error})"
        ) from error
    return state


def earlier_tokenizer_of(checkpoint: Path):
    """The tokenizer of a run trained when ``text_encoder=transformer`` read whole words, from the vocabulary its
    checkpoint saved (:func:`~uncurated.models.subword_tokenizer.word_level_tokenizer`: the same ids), or
    ``None`` when the checkpoint holds none. Such a run has no ``tokenizer.json``."""
    from ..models.subword_tokenizer import SubwordTokenizer, is_word_level_state

    extra = read_training_state(checkpoint).get(MODEL_EXTRA, {})
    states = [state for state in extra.values() if is_word_level_state(state)] if isinstance(extra, dict) else []
    return SubwordTokenizer.from_state_dict(states[0]) if states else None


def read_run_config(folder: Path) -> TrainConfig:
    """The configuration a run was trained with, from its ``config.yaml`` (read by ``yaml.safe_load``, which
    builds plain values only); raises :class:`ConfigError` naming the file when it is not such a mapping."""
    path = folder / "config.yaml"
    if not path.is_file():
        raise FileNotFoundError(f"{folder} is not a training run: {path.name} is missing")
    try:
        values = yaml.safe_load(path.read_text())
    except yaml.YAMLError as error:  # e.g. a !!python tag: safe_load builds plain values only
        problem = str(error).splitlines()[0]
        raise ConfigError(f"{path} is not a YAML file of plain values ({problem})") from None
    if not isinstance(values, dict):
        raise ConfigError(f"{path} must be a mapping of configuration keys")
    unknown = sorted(set(values) - set(FIELDS))
    if unknown:
        raise ConfigError(f"{path} has keys this version does not know: {', '.join(unknown)}")
    return TrainConfig(**with_earlier_values(values))
