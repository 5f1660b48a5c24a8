"""The default settings of the theory toys (uncurated.theory), in a module that imports nothing.

It stands outside the theory package, whose ``__init__`` imports torch. Each toy module takes its defaults
from here (``nuclr_toy.DEFAULT_SIZES`` is ``NUCLR_SIZES``), and
``uncurated toy TOY --help`` reads them without loading numpy or torch, so the command line starts at once.
"""

from __future__ import annotations

# uncurated toy nuclr (nuclr_toy).
#: The sample sizes of ``run_toy`` (the paper does not list its own; it names n = 100 for its heatmaps).
NUCLR_SIZES = (50, 100, 200, 400, 800)
#: The fresh pairs that estimate the true risk L (App. G.1 step 4).
NUCLR_FRESH_PAIRS = 50_000

# uncurated toy wpse (wpse_toy).
WPSE_SEEDS = (0, 1, 2)
WPSE_ITEMS = 16
WPSE_DIM = 3
WPSE_STEPS = 1500

# uncurated toy clip-margin (clip_margin_toy).
#: The temperatures of ``clip`` and ``clip+reg``.
CLIP_MARGIN_TEMPERATURES = (0.005, 0.01, 0.02, 0.05)
#: The weight of ``E ||W x - y||^2`` in ``clip+reg`` (see clip_margin_toy's docstring).
CLIP_MARGIN_LAM = 10.0
CLIP_MARGIN_STEPS = 1500

# uncurated toy dcl (dcl_concentration).
#: The grid: unlabeled samples ``N`` and positives ``M`` per anchor.
DCL_NEGATIVES = (16, 64, 256, 1024)
DCL_POSITIVES = (1, 4, 16, 64)
DCL_TRIALS = 400
#: The latent-class model: ``C`` classes (``tau^+ = 0.1``) of vMF embeddings in ``R^d``.
DCL_CLASSES = 10
DCL_DIM = 16
DCL_KAPPA = 30.0
