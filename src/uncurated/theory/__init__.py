"""Theory tools: exact, full-batch computations that check the papers' claims on toy problems.

- :mod:`.popularity`: NUCLR's (Wang et al. 2025) risk of Eq. 5 for given popularities
  and the convex problem of Eq. 8 that learns them, solved by gradient descent.
- :mod:`.nuclr_toy`: NUCLR's toy experiment (Sec. 3.3, App. G.1), a model
  with an exact partition function, and :func:`run_toy`, which measures the
  generalization error of MLE, GCL and NUCLR against the sample size
  (``uncurated toy nuclr`` on the command line).
- :mod:`.coupon`: Nozawa & Sato 2021's coupon-collector quantities: the probability
  that K + 1 draws cover every class, the expected number of draws (Table 3),
  the collision probability and E[ln(Col + 1)], for uniform or given class
  frequencies.
- :mod:`.pmi`: WPSE's (Uesaka et al. 2025) discrete-joint tools in torch: pointwise
  mutual information, the population symmetric InfoNCE of Eq. 2
  (differentiable) and the rank bound of Proposition C.1.
- :mod:`.wpse_toy`: a synthetic experiment of this package for WPSE, where
  lookup-table encoders fit a full-rank PMI with CLIP's inner product and with
  weighted point sets, and :func:`run_wpse_toy`, which measures each model's
  gap ``L + I(X; Y)`` (``uncurated toy wpse`` on the command line).
"""

from .coupon import collision_probability, coverage_probability, expected_draws, expected_log_collisions
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
from .pmi import inner_product_rank, mutual_information, pmi, population_loss
from .popularity import mis_risk, popularity_gradient, popularity_objective, popularity_weights, solve_popularity
from .wpse_toy import (
    LookupTables,
    ToyModel,
    WPSEToyRow,
    fit_lookup_tables,
    format_gap_table,
    mean_gaps,
    plot_gaps,
    random_joint,
    run_wpse_toy,
)

__all__ = [
    "collision_probability",
    "coverage_probability",
    "expected_draws",
    "expected_log_collisions",
    "DEFAULT_FRESH_PAIRS",
    "DEFAULT_SIZES",
    "LookupTables",
    "ToyModel",
    "ToyRow",
    "WPSEToyRow",
    "average_over_seeds",
    "fit_lookup_tables",
    "format_gap_table",
    "format_table",
    "inner_product_rank",
    "log_density",
    "log_partition",
    "mean_gaps",
    "mis_risk",
    "mle_risk",
    "mutual_information",
    "nuclr_popularity",
    "partition_function",
    "plot_errors",
    "plot_gaps",
    "pmi",
    "popularity_gradient",
    "popularity_objective",
    "popularity_weights",
    "population_loss",
    "random_joint",
    "run_toy",
    "run_wpse_toy",
    "sample_anchors",
    "sample_contrasts",
    "solve_popularity",
    "true_popularity",
    "true_risk",
]
