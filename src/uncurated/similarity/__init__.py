"""Similarities between embeddings beyond the cosine: weighted point sets and their kernels (Uesaka et al. 2025)."""

from .kernels import CombinedKernel, GaussianKernel, IMQKernel, LinearKernel, random_fourier_features
from .point_set import WeightedPointSet
from .wpse import FeatureDraw, WPSEmbedding, exact_similarity, point_set_embedding

__all__ = [
    "CombinedKernel",
    "FeatureDraw",
    "GaussianKernel",
    "IMQKernel",
    "LinearKernel",
    "WPSEmbedding",
    "WeightedPointSet",
    "exact_similarity",
    "point_set_embedding",
    "random_fourier_features",
]
