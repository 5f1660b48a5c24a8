r"""The memory-linear engine: every row statistic of a score matrix, computed tile by tile.

:class:`TiledScoreMatrix` offers the methods of
:class:`~uncurated.objectives.engine.ScoreMatrix` without ever holding the
R x C matrix. Anchors ``A`` (R x d) and candidates ``B`` (C x d) define the
inner products ``G = A B^T``; a *view* of ``G`` is one direction's score
matrix, ``S = r G - o`` (rows of ``G`` as anchors) or ``S = c G^T - o'``
(columns of ``G`` as anchors, the transposed direction of a cross pairing),
with its own inverse temperature (one, or one per anchor), column offsets and
excluded entries (positive, own view, same label).

One concept per module, listed from the top floor down: a module imports
only modules of the floors below its own (the floors are the ``tiled-floors``
contract of import-linter in pyproject.toml):

==================  ==========================================================
``matrix``          the public matrix and its record/serve protocol (:func:`fused_map`)
``replay``          what a row loss asked, kept so that later calls skip recording
``batch``           the views of one ``G``, the mode, and which engine runs a pass
``policy``          when to tile, and how large the tiles are, per device (:class:`Tiling`)
``function``        the autograd Function: the fused forward pass
``gradients``       the backward pass: per-anchor factors and gradient accumulation
``plan``            one pass: its tiles, the excluded entries per tile, its inputs
``columns``         NUCLR's column statistic, accumulated in the backward pass
``fast_path``       one shared exponential per tile where the score range allows
``views``           per-view bookkeeping: what a row loss asks of one direction
``kernels``         the same passes as fused Triton kernels (``tiling="triton"``)
``compiled_tiles``  the fast path's per-tile work as pure functions, for ``torch.compile``
``logsumexp``       the running log-sum-exp of the general path
``positives``       the positives' inner products, in row chunks
``vocabulary``      the shared vocabulary: modes, statistic keys, requests, tiles, slots, protocols
==================  ==========================================================
"""

from .matrix import TiledScoreMatrix, column_logsumexp_after_backward, fused_map
from .policy import DEFAULT_MEMORY_BUDGET, MAX_AUTO_BLOCK, Tiling, tile_bytes
from .replay import RecordedRequests

__all__ = [
    "DEFAULT_MEMORY_BUDGET",
    "MAX_AUTO_BLOCK",
    "RecordedRequests",
    "TiledScoreMatrix",
    "Tiling",
    "column_logsumexp_after_backward",
    "fused_map",
    "tile_bytes",
]
