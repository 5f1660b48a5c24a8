r"""Fused Triton kernels for the tiled engine: every recorded statistic in one kernel launch per view.

``tiling="triton"`` (or ``"auto"`` for CUDA features, when triton imports)
computes what a row loss asked of its score matrices, the same requests the
Python engine records (:func:`~uncurated.objectives.tiled.fused_map`), with
one kernel family whose switches are ``tl.constexpr`` arguments: per-anchor
inverse temperatures (iSogCLR), per-column offsets (NUCLR's popularities),
up to three log-sum-exp weights (HCL's importance weights ``L(beta + 1) -
L(beta)``; DCL and RINCE are functions of ``L(1)``), the negatives' mean
score, SigLIP's log-sigmoid sum, the own view of a two-view batch and the
supervised oracle's labels. Scores never leave the chip: the forward kernel
keeps running maxima and sums per anchor, the backward kernel recomputes each
block from the saved row statistics and accumulates ``dA = dG B`` and
``dB = dG^T A``, the learned scalars' and per-sample parameters' gradients,
and NUCLR's column statistic.

Nothing in this package imports triton but :mod:`.function`, the kernel
modules and :mod:`.interpreter`, which the engine imports only when the kernels run.

==================  ==========================================================
``support``         what the kernels accept, the errors, the untuned shapes
``configs``         the launched shape, warps, stages per device, d, type (table)
``transforms``      the elementwise functions the kernels compute on chip
``plan``            one pass: the views' requests as kernel arguments
``arguments``       the kernels' arguments in named groups (side, view, slot)
``tile``            the block-level code every kernel shares (``@triton.jit``)
``forward``         the forward kernel: one view's row statistics
``backward``        the backward kernel: one side's gradient and per-sample sums
``function``        the autograd Function that launches them
``launch``          every launch, recorded on request (counts, compile checks)
``interpreter``     Triton's CPU interpreter, repaired where it cannot take a loop bound
==================  ==========================================================
"""

from .launch import Launch, recorded_launches

__all__ = ["Launch", "recorded_launches"]
