"""Per-sample state of the global contrastive objectives (moving averages, popularities, temperatures)."""

from .store import SampleState

__all__ = ["SampleState"]
