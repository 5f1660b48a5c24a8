"""A finished (or interrupted) training run, rebuilt from its folder for evaluation.

``load_run(folder)`` reads the run's ``config.yaml``, rebuilds its model and
augmentation exactly as training did, and loads the weights of its
latest checkpoint, so that ``uncurated eval`` and ``uncurated bound`` can
measure any run the training pipeline wrote: its ``model.safetensors``, or
the shards a ``parallel=fsdp`` run wrote, read by one process (DCP reshards
them into the whole model, :func:`~uncurated.train.parallel.load_shards`). The objective is rebuilt too,
with its trained state (a learned temperature, per-sample state).

The folder alone suffices: what the model and the objective need of the
training data, the images' shape and the number of samples, is kept in its
``training_data.json`` (:func:`write_training_data`), the text tower's
tokenizer in ``tokenizer.json``, and the paths of ``config.yaml`` are
absolute (:mod:`~uncurated.train.run_paths`). The datasets themselves are
built only when asked for (:attr:`RestoredRun.splits`: the evaluation on a
test split), and for a run written before that file, which is rebuilt from
its training data.
"""

from __future__ import annotations

import json
import pickle
from dataclasses import dataclass, field
from pathlib import Path

import torch
import yaml
from torch import nn

from ..objectives import Objective
from .builders import (
    TOKENIZER_FILE,
    Splits,
    build_augmentation,
    build_model,
    build_objective,
    build_splits,
    training_data_facts,
)
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
from .data_formats import FORMATS
from .file_hashes import hashing_once
from .random_state import seed_everything

TRAINING_DATA_FILE = "training_data.json"
"""The file of a run's folder that keeps what its model and objective need of the training data."""


@dataclass
class RestoredRun:
    """What a run's folder holds, rebuilt: its configuration, trained model, objective and augmentation, and its
    datasets when asked for."""

    folder: Path
    config: TrainConfig
    model: nn.Module
    objective: Objective
    augment: nn.Module
    checkpoint: Path
    image_shape: tuple[int, int, int]
    """The (C, H, W) of the images the model was trained on."""
    built_splits: Splits | None = field(default=None, repr=False)

    @property
    def splits(self) -> Splits:
        """The run's datasets, built from its data keys on first use (its training data must be where
        ``config.yaml`` says)."""
        if self.built_splits is None:
            seed_everything(self.config.seed)
            self.built_splits = build_splits(self.config)
        return self.built_splits

    @property
    def has_test_split(self) -> bool:
        """Whether the run's dataset has a labelled test split (the in-memory ones), known without building it."""
        return FORMATS[self.config.dataset].in_memory

    def temperature(self) -> float:
        """The objective's (possibly learned) temperature."""
        return float(self.objective.temperature().detach())


def write_training_data(folder: Path, train_set) -> None:
    """Keep in ``folder`` what the model and the objective need of ``train_set``: the images' (C, H, W) and the
    number of samples (the rows of a global objective's state)."""
    image_shape, num_samples = training_data_facts(train_set)
    facts = {"image_shape": list(image_shape), "num_samples": num_samples}
    (folder / TRAINING_DATA_FILE).write_text(json.dumps(facts) + "\n")


def read_training_data(folder: Path) -> tuple[tuple[int, int, int], int] | None:
    """The images' shape and the number of samples :func:`write_training_data` kept, or ``None`` where the run
    has no such file (one written before it). :class:`ConfigError` naming the file where it is damaged."""
    path = folder / TRAINING_DATA_FILE
    if not path.is_file():
        return None
    try:
        facts = json.loads(path.read_text())
        shape, samples = tuple(int(n) for n in facts["image_shape"]), int(facts["num_samples"])
    except (ValueError, KeyError, TypeError) as error:
        raise ConfigError(
            f"{path} is damaged ({type(error).__name__}: {error}); it holds image_shape and num_samples"
        ) from None
    if len(shape) != 3 or min(shape) < 1 or samples < 1:
        raise ConfigError(f"{path} is damaged: image_shape {list(shape)}, num_samples {samples}")
    return (shape[0], shape[1], shape[2]), samples


def load_run(
    folder: Path | str, *, device: torch.device | str = "cpu", trust_python_encoders: bool = False
) -> RestoredRun:
    """Rebuild the run in ``folder`` (one with ``config.yaml`` and ``checkpoints/``) on ``device``.

    A run whose encoders are ``python:module:function`` factories is refused
    with :class:`ConfigError` unless ``trust_python_encoders``: rebuilding it
    imports that module, which runs its code.
    """
    with hashing_once():  # the checkpoint chosen (every file hashed), then loaded without hashing again
        return _load_run(Path(folder), device, trust_python_encoders)


def _load_run(folder: Path, device: torch.device | str, trust_python_encoders: bool) -> RestoredRun:
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
    kept, splits = read_training_data(folder), None
    if kept is None:  # a run written before training_data.json: its training data tells
        splits = build_splits(config)
        kept = training_data_facts(splits.train)
    image_shape, num_samples = kept
    tokenizer_path = folder / TOKENIZER_FILE
    earlier = None if tokenizer_path.is_file() else earlier_tokenizer_of(checkpoint)
    train_set = None if splits is None else splits.train
    model = build_model(config, train_set, tokenizer_path=tokenizer_path, tokenizer=earlier, image_shape=image_shape)
    objective = build_objective(config, train_set, num_samples=num_samples)
    state = load_weights(checkpoint, model)
    load_objective_state(checkpoint, objective, state)
    model.to(device).eval()
    augment = build_augmentation(config)
    return RestoredRun(folder, config, model, objective.to(device), augment, checkpoint, image_shape, splits)


def load_weights(checkpoint: Path, model: nn.Module) -> dict:
    """Verify ``checkpoint``, load its weights into ``model`` (whole, in this process: from ``model.safetensors``
    or from the shards of a ``parallel=fsdp`` run) and return its training state."""
    shards = sharded_weights(checkpoint)
    if shards is None:
        return load_checkpoint(checkpoint, model)
    from .parallel import load_shards

    state = read_training_state(checkpoint, with_shards=True)
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
