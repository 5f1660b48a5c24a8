"""Training: configuration, the loop, distributed execution, checkpoints (``uncurated train``)."""

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from .config import ConfigError, TrainConfig, load_config
    from .run import evaluate, train

_EXPORTS = {
    "ConfigError": ".config",
    "TrainConfig": ".config",
    "load_config": ".config",
    "evaluate": ".run",
    "train": ".run",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = ["ConfigError", "TrainConfig", "evaluate", "load_config", "train"]
