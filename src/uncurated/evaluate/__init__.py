"""Evaluation of learned representations."""

from .point_set_zero_shot import ZeroShotResult, class_embeddings, point_set_zero_shot

__all__ = ["ZeroShotResult", "class_embeddings", "point_set_zero_shot"]
