"""Model parts: heads that turn encoder outputs into the embeddings the objectives consume."""

from .point_set_head import PointSetHead

__all__ = ["PointSetHead"]
