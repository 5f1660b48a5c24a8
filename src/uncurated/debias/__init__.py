"""Training-free debiasing of vision-language embeddings (thesis Ch. 7).

A zero-shot classifier's weights are text embeddings of class prompts, and they
carry spurious attributes (Table 7.1). This package removes them in closed
form, with no data and no labels:

- :mod:`.projection`: the orthogonal projection ``P0`` away from spurious
  prompt embeddings, its calibrated version ``P*`` (Lemma 7.1) and the
  equalization of prompt embeddings (Lemma 7.2);
- :mod:`.metrics`: worst-group and average accuracy (eq. 7.1), MaxSkew@k,
  the statistical-parity discrepancy (eq. 7.2) and the mean pair distance;
- :mod:`.prompts`: the thesis's prompt sets and one for FashionCaptions.
"""

from .metrics import GroupAccuracy, group_robustness, max_skew_at_k, mean_pair_distance, parity_discrepancy
from .projection import (
    DISCRIMINATIVE_LAMBDA,
    GENERATIVE_LAMBDA,
    calibrated_projection,
    calibrated_projection_svd,
    calibration_matrix,
    equalize,
    orthogonal_projection,
    project,
)
from .prompts import PromptSet, available_prompt_sets, load_prompts

__all__ = [
    "DISCRIMINATIVE_LAMBDA",
    "GENERATIVE_LAMBDA",
    "GroupAccuracy",
    "PromptSet",
    "available_prompt_sets",
    "calibrated_projection",
    "calibrated_projection_svd",
    "calibration_matrix",
    "equalize",
    "group_robustness",
    "load_prompts",
    "max_skew_at_k",
    "mean_pair_distance",
    "orthogonal_projection",
    "parity_discrepancy",
    "project",
]
