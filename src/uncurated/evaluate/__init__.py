"""Evaluation of learned representations: pure functions of frozen feature tensors.

Modules:

- :mod:`.classification`: the accuracy summary every classifier returns
  (top-1, mean per-class, per-class) and the shared input checks;
- :mod:`.linear_probe`: logistic regression on standardized features with
  the regularization searched on a validation split (scikit-learn, or torch
  for large feature sets);
- :mod:`.knn`: the weighted cosine kNN classifier of InstDisc / DINO;
- :mod:`.mean_classifier`: the class-centroid classifier and its supervised
  loss ``L^mu_sup`` (Nozawa & Sato 2021);
- :mod:`.zero_shot`: CLIP zero-shot classification with prompt ensembles;
- :mod:`.retrieval`: image-text Recall@K in both directions;
- :mod:`.plots`: similarity histograms, t-SNE maps, per-class accuracy bars;
- :mod:`.point_set_zero_shot`: zero-shot classification with weighted point
  sets (Uesaka et al. 2025).
"""

from .classification import ClassificationResult, mean_per_class_accuracy
from .knn import knn_classifier, knn_predict
from .linear_probe import (
    DEFAULT_C_GRID,
    DEFAULT_WEIGHT_DECAY_GRID,
    ProbeResult,
    linear_probe,
    stratified_split,
    torch_linear_probe,
)
from .mean_classifier import (
    MeanClassifierResult,
    class_means,
    mean_classifier,
    mean_classifier_logits,
    mean_classifier_loss,
)
from .plots import pair_similarities, plot_per_class_accuracy, plot_similarity_histograms, plot_tsne
from .point_set_zero_shot import ZeroShotResult, class_embeddings, point_set_zero_shot
from .retrieval import retrieval_recall
from .zero_shot import ZeroShotAccuracy, prompt_ensemble, zero_shot_accuracy

__all__ = [
    "DEFAULT_C_GRID",
    "DEFAULT_WEIGHT_DECAY_GRID",
    "ClassificationResult",
    "MeanClassifierResult",
    "ProbeResult",
    "ZeroShotAccuracy",
    "ZeroShotResult",
    "class_embeddings",
    "class_means",
    "knn_classifier",
    "knn_predict",
    "linear_probe",
    "mean_classifier",
    "mean_classifier_logits",
    "mean_classifier_loss",
    "mean_per_class_accuracy",
    "pair_similarities",
    "plot_per_class_accuracy",
    "plot_similarity_histograms",
    "plot_tsne",
    "point_set_zero_shot",
    "prompt_ensemble",
    "retrieval_recall",
    "stratified_split",
    "torch_linear_probe",
    "zero_shot_accuracy",
]
