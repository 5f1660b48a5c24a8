"""What a row loss receives, on every engine: the row statistics alone, the dense matrices refused alike."""

from __future__ import annotations

import importlib.util
import os

import pytest
import torch

from uncurated import objectives
from uncurated.objectives import InfoNCE, RowStatistics
from uncurated.objectives.engine import ScoreMatrix, cross_pairing
from uncurated.objectives.row_statistics import DENSE_MATRICES
from uncurated.objectives.tiled import TiledScoreMatrix, Tiling

KERNELS = pytest.param(
    "triton",
    marks=pytest.mark.skipif(
        importlib.util.find_spec("triton") is None
        or (not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1"),
        reason="the kernels need CUDA or Triton's interpreter (TRITON_INTERPRET=1, tests/conftest.py)",
    ),
)
ENGINES = ["never", "always", KERNELS]
"""The dense engine, the Python tiles, the Triton kernels (under the interpreter without CUDA)."""


class HardestNegative(InfoNCE):
    """A user's row loss that reaches for the whole matrix: the hardest negative's score, read off ``logits``."""

    def row_loss(self, scores: RowStatistics) -> torch.Tensor:
        logits = scores.logits  # type: ignore[attr-defined]
        return logits.max(dim=1).values - scores.positive_logit()


def features(batch: int = 8, dim: int = 16) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(3)
    return tuple(torch.randn(batch, dim, generator=generator, requires_grad=True) for _ in range(2))


def refusal(tiling: str) -> str:
    """The message a row loss reading ``logits`` gets on the engine of ``tiling``."""
    loss = HardestNegative(tiling=tiling, block_size=16)
    with pytest.raises(AttributeError) as raised:
        loss(*features())
    return str(raised.value)


@pytest.mark.parametrize("tiling", ENGINES)
def test_a_row_loss_reading_logits_is_refused_alike_on_every_engine(tiling):
    """The dense engine refuses it too, with the message the tiles give: a loss that passes on the CPU cannot fail
    when tiling="auto" picks the tiles or the kernels on a GPU."""
    message = refusal(tiling)
    assert message == refusal("never")
    assert "(logits)" in message and "negative_sum(fn, *params)" in message and "negative_logsumexp" in message


@pytest.mark.parametrize("name", DENSE_MATRICES)
@pytest.mark.parametrize("matrix", ["dense", "tiled"])
def test_every_dense_matrix_is_refused_on_the_score_matrices_a_row_loss_sees(name, matrix):
    a, b = (x.detach().double() for x in features(4, 3))
    build = ScoreMatrix if matrix == "dense" else (lambda *args, **kw: TiledScoreMatrix(*args, tiling=Tiling(), **kw))
    for scores in cross_pairing(a, b, 2.0, matrix=build):
        assert isinstance(scores, RowStatistics)
        with pytest.raises(AttributeError, match=rf"not its dense R x C matrices \({name}\)"):
            getattr(scores, name)


@pytest.mark.parametrize("tiling", ENGINES)
def test_the_row_statistics_serve_a_user_loss_alike_on_every_engine(tiling):
    """The same loss written with the statistics (a soft hardest negative) gives the same value and gradients on
    every engine."""

    class SoftHardestNegative(InfoNCE):
        def row_loss(self, scores: RowStatistics) -> torch.Tensor:
            return scores.negative_logsumexp(4.0) / 4.0 - scores.positive_logit()

    a, b = features()
    want = SoftHardestNegative(tiling="never")(a, b)
    want_grads = torch.autograd.grad(want, (a, b))
    got = SoftHardestNegative(tiling=tiling, block_size=16)(a, b)
    got_grads = torch.autograd.grad(got, (a, b))
    torch.testing.assert_close(got, want, rtol=1e-5, atol=1e-6)
    for have, expected in zip(got_grads, want_grads, strict=True):
        torch.testing.assert_close(have, expected, rtol=1e-4, atol=1e-6)


def test_an_objective_without_state_checks_no_indices_and_refuses_nothing():
    """The hooks the trainer calls on every objective: no-ops where no state is kept."""
    loss = objectives.build("infonce")
    assert loss.check_indices(torch.tensor([5, 5, -1]), 3) is None  # no index is read by a batch objective
    assert loss.take_backward_refusal() is None
