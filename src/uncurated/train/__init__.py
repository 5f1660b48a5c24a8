"""Training: configuration, the loop, distributed execution, checkpoints (``uncurated train``)."""

from .config import ConfigError, TrainConfig, load_config
from .run import evaluate, train

__all__ = ["ConfigError", "TrainConfig", "evaluate", "load_config", "train"]
