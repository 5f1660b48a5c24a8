"""The objective of a run from the configuration's ``objective`` and ``objective.NAME`` keys."""

from __future__ import annotations

from ... import data, objectives
from ..config import ConfigError, TrainConfig
from .datasets import dataset_size


def build_objective(
    config: TrainConfig, train_set: data.TrainingData | None, *, num_samples: int | None = None
) -> objectives.Objective:
    """The objective ``config`` names, with the pairing of its pipeline unless given. A global objective has a
    row of state per sample: ``num_samples`` of them, else as many as ``train_set`` holds."""
    name, params = config.objective_spec()
    params.setdefault("pairing", "two_view" if config.pipeline == "two_view" else "cross")
    if config.point_sets:
        # WPSE normalizes its points, never the pooled vectors, and learns 1/t itself in [1, 100].
        params.setdefault("normalize", False)
        if params.get("learnable"):
            params.setdefault("temperature_parametrization", "identity")
    params.update(config.engine_settings().keywords())  # checked when the configuration was loaded
    spec = {spec.name: spec for spec in objectives.available()}.get(name)
    if spec is not None and spec.stateful:
        if num_samples is None and train_set is None:
            raise ValueError(f"{name} keeps a row of state per sample: it needs num_samples or the training set")
        params.setdefault("num_samples", dataset_size(train_set) if train_set is not None else num_samples)
    try:
        return objectives.build(name, **params)
    except ValueError as error:
        raise ConfigError(f"objective: {error}") from error
