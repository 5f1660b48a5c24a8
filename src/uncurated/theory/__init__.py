"""Theory tools: exact, full-batch computations that check the papers' claims on toy problems.

- :mod:`.popularity`: NUCLR's (seed 000) risk of Eq. 5 for given popularities
  and the convex problem of Eq. 8 that learns them, solved by gradient descent.
- :mod:`.nuclr_toy`: NUCLR's toy experiment (Sec. 3.3, App. G.1), a model
  with an exact partition function, and :func:`run_toy`, which measures the
  generalization error of MLE, GCL and NUCLR against the sample size
  (``uncurated toy nuclr`` on the command line).
"""

from .nuclr_toy import (
    DEFAULT_FRESH_PAIRS,
    DEFAULT_SIZES,
    ToyRow,
    average_over_seeds,
    format_table,
    log_density,
    log_partition,
    mle_risk,
    nuclr_popularity,
    partition_function,
    plot_errors,
    run_toy,
    sample_anchors,
    sample_contrasts,
    true_popularity,
    true_risk,
)
from .popularity import mis_risk, popularity_gradient, popularity_objective, popularity_weights, solve_popularity

__all__ = [
    "DEFAULT_FRESH_PAIRS",
    "DEFAULT_SIZES",
    "ToyRow",
    "average_over_seeds",
    "format_table",
    "log_density",
    "log_partition",
    "mis_risk",
    "mle_risk",
    "nuclr_popularity",
    "partition_function",
    "plot_errors",
    "popularity_gradient",
    "popularity_objective",
    "popularity_weights",
    "run_toy",
    "sample_anchors",
    "sample_contrasts",
    "solve_popularity",
    "true_popularity",
    "true_risk",
]
