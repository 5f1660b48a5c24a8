"""A row statistic declared once, in a module of its own, is computed by every engine from its declaration alone."""

from __future__ import annotations

import importlib.util
import re
import sys
import textwrap
from functools import partial
from pathlib import Path

import pytest
import torch

from uncurated.objectives import declarations
from uncurated.objectives.engine import ScoreMatrix, cross_pairing, two_view_pairing
from uncurated.objectives.local_rows import SplitCandidates
from uncurated.objectives.tiled import RecordedRequests, TiledScoreMatrix, Tiling, fused_map

ROOT = Path(__file__).resolve().parents[1]

# A user's module: the negatives' second moment under their softmax, sum_j softmax_j(S'_i) S'_ij^2 (a mean: no
# oracle rescaling; split across processes by the parts' shares of the exponentials), and the plain sum of the
# squared scores (a sum: rescaled by N / N_i, the parts added).
STATISTIC_MODULE = '''
import torch

from uncurated.objectives.declarations import StatisticDeclaration, add_parts, declare, softmax_parts


def second_moment(scores, negatives):
    masked = scores.masked_fill(~negatives, -torch.inf)
    return (torch.softmax(masked, dim=1) * torch.where(negatives, scores**2, 0.0)).sum(dim=1)


class SoftmaxSecondMoment:
    """A running maximum M, the sum Z of e^{S' - M} and the sum of e^{S' - M} S'^2, rescaled as M grows."""

    def start(self, length, dtype, device):
        return (torch.full((length,), -torch.inf, dtype=dtype, device=device),
                torch.zeros(length, dtype=dtype, device=device), torch.zeros(length, dtype=dtype, device=device))

    def add(self, state, scores, negatives):
        maximum, total, weighted = state
        masked = scores.masked_fill(~negatives, -torch.inf)
        new = torch.maximum(maximum, masked.amax(dim=1))
        reference = torch.where(torch.isneginf(new), 0.0, new)
        decay = torch.exp(maximum - reference)
        exps = torch.exp(masked - reference[:, None])
        total.mul_(decay).add_(exps.sum(dim=1))
        weighted.mul_(decay).add_((exps * torch.where(negatives, scores**2, 0.0)).sum(dim=1))
        maximum.copy_(new)

    def finish(self, state):
        maximum, total, weighted = state
        return weighted / total, (maximum + torch.log(total),)


def second_moment_slope(scores, negatives, value, saved, grad):
    (logsumexp,) = saved
    return grad * torch.exp(scores - logsumexp) * (2 * scores + scores**2 - value)


class SquareSum:
    def start(self, length, dtype, device):
        return (torch.zeros(length, dtype=dtype, device=device),)

    def add(self, state, scores, negatives):
        state[0].add_(torch.where(negatives, scores**2, 0.0).sum(dim=1))

    def finish(self, state):
        return state[0], ()


SECOND_MOMENT = declare(StatisticDeclaration(
    "negative_second_moment", second_moment, SoftmaxSecondMoment(), second_moment_slope, softmax_parts))
SQUARE_SUM = declare(StatisticDeclaration(
    "negative_square_sum",
    lambda scores, negatives: torch.where(negatives, scores**2, 0.0).sum(dim=1),
    SquareSum(),
    lambda scores, negatives, value, saved, grad: grad * 2 * scores,
    add_parts,
    oracle=lambda value, log_rescale: value * torch.exp(log_rescale),
))
'''


@pytest.fixture
def statistic_module(tmp_path, monkeypatch):
    """The user's module, imported from a file of its own into an empty registry."""
    monkeypatch.setattr(declarations, "DECLARED", {})
    path = tmp_path / "user_statistics.py"
    path.write_text(textwrap.dedent(STATISTIC_MODULE))
    spec = importlib.util.spec_from_file_location("user_statistics", path)
    module = importlib.util.module_from_spec(spec)
    monkeypatch.setitem(sys.modules, "user_statistics", module)
    spec.loader.exec_module(module)
    return module


def row_loss(scores):
    """Declared and built-in statistics asked together, each with its own weight, in one fused pass."""
    return (
        0.7 * scores.statistic("negative_second_moment")
        - 0.3 * scores.statistic("negative_square_sum")
        + scores.negative_logsumexp(1.3)
        + 0.5 * scores.negative_mean_score()
    )


def features(batch=7, dim=5, seed=0):
    generator = torch.Generator().manual_seed(seed)
    a = torch.nn.functional.normalize(torch.randn(batch, dim, generator=generator, dtype=torch.float64), dim=1)
    b = torch.nn.functional.normalize(torch.randn(batch, dim, generator=generator, dtype=torch.float64), dim=1)
    return a.requires_grad_(), b.requires_grad_()


def value_and_gradients(pairing, tensors, matrix, recorded=None, compute=row_loss, **options):
    """The row loss ``compute`` summed over the anchors and directions, and its gradients."""
    matrices = pairing(*tensors[:2], tensors[2], matrix=matrix, **options)
    losses = fused_map(compute, matrices, recorded=recorded)
    total = sum(loss.sum() for loss in losses)
    return [total.detach(), *torch.autograd.grad(total, tensors)]


def tiles(block, mode="always"):
    return partial(TiledScoreMatrix, tiling=Tiling(mode, block))


@pytest.mark.parametrize("block", [2, 3, 64])
def test_a_declared_statistic_is_its_dense_formula_on_the_tiles_cross(statistic_module, block):
    """Per-anchor scales and offsets with gradients, both directions of a cross pairing, several tile shapes."""
    a, b = features()
    scale = torch.linspace(3.0, 9.0, 7, dtype=torch.float64, requires_grad=True)
    offsets = torch.linspace(-0.4, 0.6, 7, dtype=torch.float64, requires_grad=True)
    tensors = [a, b, scale, offsets]

    def pairing(a, b, scale, matrix):
        return cross_pairing(a, b, scale, scale_b=2.5 * scale, offset_a=offsets, offset_b=-offsets, matrix=matrix)

    expected = value_and_gradients(pairing, tensors, ScoreMatrix)
    got = value_and_gradients(pairing, tensors, tiles(block))
    for want, have in zip(expected, got, strict=True):
        torch.testing.assert_close(have, want, rtol=1e-10, atol=1e-12)
    assert expected[-1].abs().sum() > 0  # the offsets' gradient is not trivially zero


def test_a_declared_statistic_is_its_dense_formula_on_the_tiles_two_views_with_labels(statistic_module):
    """The own view left out, labels (the supervised oracle rescales the sum, not the mean) and a replayed call."""
    a, b = features(batch=8, seed=1)
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 3, 3])
    scale = torch.tensor(4.0, dtype=torch.float64, requires_grad=True)
    tensors = [a, b, scale]
    expected = value_and_gradients(two_view_pairing, tensors, ScoreMatrix, labels=labels)
    recorded, runs = RecordedRequests(), []

    def counted(scores):
        runs.append(scores.recording)
        return row_loss(scores)

    for _ in range(2):  # the second call replays the recorded requests, declared statistics included
        got = value_and_gradients(two_view_pairing, tensors, tiles(3), recorded, counted, labels=labels)
        for want, have in zip(expected, got, strict=True):
            torch.testing.assert_close(have, want, rtol=1e-10, atol=1e-12)
    assert runs == [True, False, False]  # record and serve, then serve alone
    (asked,) = recorded._asked.values()
    assert [d.name for d in asked[0][2]] == ["negative_second_moment", "negative_square_sum"]


def test_the_oracle_rescales_a_declared_sum_and_not_a_mean(statistic_module):
    """Under labels the sum over the N_i negatives of another label is rescaled to N = B - 1, the mean is not."""
    a, b = features(batch=6, seed=2)
    labels = torch.tensor([0, 1, 0, 1, 2, 2])
    scores = 4.0 * (a @ b.T).detach()
    negatives = (labels[:, None] != labels[None, :]) & ~torch.eye(6, dtype=torch.bool)
    square_sum = torch.where(negatives, scores**2, 0.0).sum(1) * 5 / negatives.sum(1)
    masked = scores.masked_fill(~negatives, -torch.inf)
    second_moment = (torch.softmax(masked, dim=1) * torch.where(negatives, scores**2, 0.0)).sum(1)
    for matrix in (ScoreMatrix, tiles(4)):
        forward, _ = cross_pairing(a.detach(), b.detach(), 4.0, labels, matrix=matrix)
        torch.testing.assert_close(forward.statistic("negative_square_sum"), square_sum, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(forward.statistic("negative_second_moment"), second_moment, rtol=1e-12, atol=0)


def test_a_declared_statistic_on_demand_outside_a_fused_pass(statistic_module):
    a, b = features()
    dense = ScoreMatrix(a, b, 5.0, torch.arange(7)).statistic("negative_second_moment")
    tiled = TiledScoreMatrix(a, b, 5.0, torch.arange(7), tiling=Tiling("always", 3)).statistic("negative_second_moment")
    torch.testing.assert_close(tiled, dense, rtol=1e-12, atol=1e-12)


def test_a_declared_statistic_beside_a_fast_path_log_sum_exp(statistic_module):
    """A log-sum-exp that the shared exponentials compute in the tile's own buffer, the last use of its product,
    unless a declared statistic reads the scores after it."""
    a, b = features()
    tiled = TiledScoreMatrix(a, b, 4.0, torch.arange(7), tiling=Tiling("always", 3))

    def loss(scores):
        return scores.negative_logsumexp(1.3) + scores.statistic("negative_second_moment")

    (got,) = fused_map(loss, [tiled])
    torch.testing.assert_close(got, loss(ScoreMatrix(a, b, 4.0, torch.arange(7))), rtol=1e-12, atol=1e-12)


class Processes:
    """Process ``rank`` of three holding 3, 2 and 2 of 7 pairs: what every process's all-gather of the parts brings,
    given the parts of the others."""

    counts = (3, 2, 2)
    global_size = 7

    def __init__(self, rank, others):
        self.rank, self.others = rank, others
        self.local_size = self.counts[rank]
        self.rows = slice(sum(self.counts[:rank]), sum(self.counts[: rank + 1]))

    def gather_parts(self, part, kind):
        return torch.cat([*self.others[: self.rank], part, *self.others[self.rank :]])


@pytest.mark.parametrize("rank", [0, 1, 2])
@pytest.mark.parametrize("name", ["negative_second_moment", "negative_square_sum"])
def test_a_declared_statistic_split_across_processes_combines_by_its_split_rule(statistic_module, name, rank):
    """The texts' direction of a cross pairing split across three processes: each holds a part of every text's
    negatives (every text against its own images); the parts combined by the declaration's rule are the whole
    batch's statistic, at each process's texts."""
    a, b = features()
    whole = ScoreMatrix(b, a, 5.0, torch.arange(7)).statistic(name)
    shards = [Processes(k, []).rows for k in range(3)]
    texts = torch.arange(7)
    parts = [
        ScoreMatrix(b, a[rows], 5.0, torch.where((texts >= rows.start) & (texts < rows.stop), texts - rows.start, -1))
        for rows in shards
    ]
    stacked = [torch.stack([part.negative_logsumexp(1.0), part.statistic(name)])[None] for part in parts]
    rows = shards[rank]
    split = SplitCandidates(parts[rank], Processes(rank, stacked[:rank] + stacked[rank + 1 :]), b[rows], a[rows], 5.0)
    torch.testing.assert_close(split.statistic(name), whole[rows], rtol=1e-12, atol=1e-12)


def test_the_kernels_refuse_a_declared_statistic_and_auto_takes_the_python_tiles(statistic_module, monkeypatch):
    a, b = (x.detach().float() for x in features())  # the kernels take float32 features
    kernels = TiledScoreMatrix(a, b, 5.0, torch.arange(7), tiling=Tiling("triton", 16))
    with pytest.raises(ValueError, match="no kernel for the declared statistics 'negative_second_moment'"):
        fused_map(lambda scores: scores.statistic("negative_second_moment"), [kernels])
    monkeypatch.setattr(Tiling, "use_kernels", lambda self, features: True)  # auto choosing the kernels (CUDA)
    auto = TiledScoreMatrix(a, b, 5.0, torch.arange(7), tiling=Tiling("auto", 16))
    assert auto._batch.kernels

    def loss(scores):  # the positive scores too, which the kernels would compute in their pass
        return scores.statistic("negative_second_moment") - scores.positive_logit() + scores.negative_logsumexp(2.0)

    (got,) = fused_map(loss, [auto])
    torch.testing.assert_close(got, loss(ScoreMatrix(a, b, 5.0, torch.arange(7))), rtol=1e-5, atol=1e-6)


def test_a_name_declared_twice_or_never_is_refused(statistic_module):
    again = declarations.StatisticDeclaration(
        "negative_second_moment",
        lambda s, n: s.sum(1),
        statistic_module.SquareSum(),
        lambda *_: 0.0,
        declarations.add_parts,
    )
    with pytest.raises(ValueError, match="declared twice: by user_statistics and by .*test_statistic_declarations"):
        declarations.declare(again)
    a, b = features()
    with pytest.raises(ValueError, match="no statistic 'hardest' is declared .registered: negative_second_moment"):
        ScoreMatrix(a, b, 5.0, torch.arange(7)).statistic("hardest")


def test_a_new_statistic_touches_the_files_design_md_counts(statistic_module):
    """The files that name the new statistic, counted from the code: its own module, and none of the package's, whose
    engines compute it from the registry; docs/design.md's table says as many."""
    sources = [*sorted((ROOT / "src").rglob("*.py")), Path(statistic_module.__file__)]
    naming = [path for path in sources if "negative_second_moment" in path.read_text()]
    assert naming == [Path(statistic_module.__file__)]
    row = re.search(r"^\| A new row statistic \| (\d+) \|", (ROOT / "docs" / "design.md").read_text(), re.MULTILINE)
    assert row is not None and int(row.group(1)) == len(naming) <= 5
