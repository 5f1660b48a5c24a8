"""The parts of a run, together: what the training loop trains and reads."""

from __future__ import annotations

from dataclasses import dataclass

from torch import nn

from ...data import TrainingData
from ...objectives import Objective


@dataclass
class TrainingParts:
    """Everything the loop trains and reads, built from a configuration."""

    model: nn.Module
    objective: Objective
    dataset: TrainingData
    augment: nn.Module
    pipeline: str
