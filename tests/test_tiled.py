"""The tiled engine: equal to the dense one in value and in every gradient, for every objective."""

from __future__ import annotations

import importlib.util
import os
import subprocess
import sys
import textwrap

import pytest
import torch
import torch.nn.functional as F
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten

from uncurated import objectives
from uncurated.objectives import functional
from uncurated.objectives.engine import ScoreMatrix, cross_pairing
from uncurated.objectives.infonce import infonce_rows
from uncurated.objectives.tiled import (
    DEFAULT_MEMORY_BUDGET,
    MAX_AUTO_BLOCK,
    TiledScoreMatrix,
    Tiling,
    column_logsumexp_after_backward,
    columns,
    fast_path,
    fused_map,
    tile_bytes,
)
from uncurated.objectives.tiled.batch import TiledBatch
from uncurated.similarity import CombinedKernel, GaussianKernel, WeightedPointSet, WPSEmbedding

FUNCTIONS = {
    "infonce": functional.infonce,
    "siglip": functional.siglip,
    "cyclip": functional.cyclip,
    "dcl": functional.dcl,
    "hcl": functional.hcl,
    "rince": functional.rince,
    "clip_reg": functional.clip_reg,
}
STATEFUL = ("sogclr", "isogclr", "nuclr")
EXACT = {"rtol": 1e-10, "atol": 1e-10}
# (temperature, engine path): the shared-exponential fast path where the score range allows it, and the
# running-max path forced by disabling the fast one (float64's range admits t = 0.01 on the fast path).
PATHS = [(0.3, "shared"), (0.01, "shared"), (0.01, "running-max")]
PATH_IDS = ["t0.3-shared", "t0.01-shared", "t0.01-running-max"]


# Objectives none of whose statistics the shared exponentials can serve, and why.
NO_FAST_PATH = {"siglip": "negative sums only"}


class EnginePath(str):
    """The engine path a test asked for, and whether the shared exponentials served a statistic."""

    taken: list[bool]

    def fast_path_taken(self) -> bool:
        return any(self.taken)

    def expects_fast_path(self, name: str) -> bool:
        return self == "shared" and name not in NO_FAST_PATH


@pytest.fixture
def engine_path(request, monkeypatch):
    """Force the running-max path by leaving no float type to the shared exponentials; watch which path ran."""
    if request.param == "running-max":
        monkeypatch.setattr(fast_path, "SAFE_SPREAD", {})
    path = EnginePath(request.param)
    path.taken = []
    forward_tile = fast_path.SharedExponentials.forward_tile

    def watched(self, tile, keep):
        path.taken.append(bool(self.groups))
        return forward_tile(self, tile, keep)

    monkeypatch.setattr(fast_path.SharedExponentials, "forward_tile", watched)
    return path


# (batch, block size): blocks that divide the batch, that do not, of one row, larger than the batch; B = 2 and primes.
SHAPES = [(2, 1), (2, 3), (7, 3), (8, 4), (13, 5)]


def features(batch, dim=5, dtype=torch.float64, seed=0, duplicate=False):
    generator = torch.Generator().manual_seed(seed)
    a = torch.randn(batch, dim, generator=generator, dtype=dtype)
    b = torch.randn(batch, dim, generator=generator, dtype=dtype)
    if duplicate:  # a repeated sample: equal rows and equal columns
        a[-1], b[-1] = a[0], b[0]
    return a.requires_grad_(True), b.requires_grad_(True)


def value_and_gradients(fn, tensors):
    value = fn()
    return [value.detach(), *torch.autograd.grad(value, tensors)]


def assert_all_close(expected, got):
    """Equal to 1e-10, relative to each tensor's largest entry (RINCE at t = 0.01 reaches 1e20 and cancels)."""
    assert len(expected) == len(got)
    for want, have in zip(expected, got, strict=True):
        scale = max(1.0, float(want.detach().abs().max()))
        torch.testing.assert_close(have, want, rtol=1e-10, atol=1e-10 * scale)


@pytest.mark.parametrize("name", list(FUNCTIONS))
@pytest.mark.parametrize("pairing", ["cross", "two_view"])
@pytest.mark.parametrize(("temperature", "engine_path"), PATHS, ids=PATH_IDS, indirect=["engine_path"])
def test_functional_objectives_equal_dense_in_value_and_gradients(name, pairing, temperature, engine_path):
    """Features and a learnable temperature (and SigLIP's bias), for blocks that do and do not divide B."""
    fn = FUNCTIONS[name]
    for batch, block in SHAPES:
        for duplicate in (False, True) if batch > 2 else (False,):
            a, b = features(batch, duplicate=duplicate)
            t = torch.tensor(temperature, dtype=torch.float64, requires_grad=True)
            extra = {"bias": torch.tensor(-1.5, dtype=torch.float64, requires_grad=True)} if name == "siglip" else {}
            tensors = [a, b, t, *extra.values()]

            def loss(tiling, block_size=None):
                return fn(a, b, temperature=t, pairing=pairing, tiling=tiling, block_size=block_size, **extra)

            dense = value_and_gradients(lambda: loss("never"), tensors)
            tiled = value_and_gradients(lambda: loss("always", block), tensors)
            assert_all_close(dense, tiled)
    assert engine_path.fast_path_taken() == engine_path.expects_fast_path(name)


@pytest.mark.parametrize("name", ["infonce", "dcl", "hcl", "rince"])
@pytest.mark.parametrize("pairing", ["cross", "two_view"])
@pytest.mark.parametrize("engine_path", ["shared", "running-max"], indirect=True)
def test_supervised_oracle_is_tiled_too(name, pairing, engine_path):
    a, b = features(9)
    labels = torch.tensor([0, 1, 2, 0, 1, 2, 3, 3, 4])
    fn = FUNCTIONS[name]
    dense = value_and_gradients(lambda: fn(a, b, pairing=pairing, labels=labels, tiling="never"), [a, b])
    for block in (2, 4, 9):
        tiled = value_and_gradients(
            lambda: fn(a, b, pairing=pairing, labels=labels, tiling="always", block_size=block), [a, b]
        )
        assert_all_close(dense, tiled)
    assert engine_path.fast_path_taken() == engine_path.expects_fast_path(name)


KERNELS_INTERPRETED = importlib.util.find_spec("triton") is not None and os.environ.get("TRITON_INTERPRET") == "1"
EVERY_ENGINE = [
    ("never", "shared"),
    ("always", "shared"),
    ("always", "running-max"),
    pytest.param(
        "triton",
        "shared",
        marks=pytest.mark.skipif(
            not KERNELS_INTERPRETED, reason="the kernels take these CPU tensors under Triton's interpreter only"
        ),
    ),
]
EVERY_ENGINE_IDS = ["dense", "tiles-shared", "tiles-running-max", "kernels"]


@pytest.mark.parametrize("name", ["infonce", "dcl", "hcl", "rince"])
@pytest.mark.parametrize("pairing", ["cross", "two_view"])
@pytest.mark.parametrize(("tiling", "engine_path"), EVERY_ENGINE, ids=EVERY_ENGINE_IDS, indirect=["engine_path"])
def test_supervised_oracle_masks_whole_blocks_on_every_engine(name, pairing, tiling, engine_path):
    """Labels sorted by class (B = 48, three classes of 16, blocks of 16): every candidate of a first-class
    anchor's first block shares its label, so its running maximum (the kernels', the Python tiles' on the
    running-max path) is still ``-inf`` after that block, where an unguarded shift makes ``e^{-inf - (-inf)}``
    NaN. float32 on every engine (the kernels take no float64), against the dense engine in float64, to float32
    rounding of each tensor's largest entry."""
    a, b = (x.float().detach().requires_grad_(True) for x in features(48, dim=24))
    labels = torch.arange(48) // 16
    fn = FUNCTIONS[name]
    wide = [x.detach().double().requires_grad_(True) for x in (a, b)]
    exact = value_and_gradients(lambda: fn(*wide, pairing=pairing, labels=labels, tiling="never"), wide)
    block = None if tiling == "never" else 16
    got = value_and_gradients(lambda: fn(a, b, pairing=pairing, labels=labels, tiling=tiling, block_size=block), [a, b])
    for want, have in zip(exact, got, strict=True):
        assert have.dtype == torch.float32 and bool(torch.isfinite(have).all())
        scale = float(want.abs().max())
        torch.testing.assert_close(have.double(), want, rtol=0.0, atol=2e-5 * scale)
    if tiling == "always":
        assert engine_path.fast_path_taken() == engine_path.expects_fast_path(name)


def test_supervised_oracle_without_another_label_raises_on_both_paths():
    a, b = features(4)
    labels = torch.tensor([0, 0, 1, 1])
    for tiling in ("never", "always"):
        with pytest.raises(ValueError, match="no negative with another label"):
            functional.infonce(a, b, labels=torch.zeros(4, dtype=torch.long), tiling=tiling)
        functional.infonce(a, b, labels=labels, tiling=tiling)


@pytest.mark.parametrize("name", ["dcl", "hcl"])
@pytest.mark.parametrize("beta", [0.0, 2.0])
def test_extra_positive_views_and_hcl_weights(name, beta):
    a, b = features(7)
    extra = torch.randn(7, 2, 5, dtype=torch.float64)
    fn = FUNCTIONS[name]
    options = {"beta": beta} if name == "hcl" else {}
    dense = value_and_gradients(lambda: fn(a, b, extra_positives=extra, tiling="never", **options), [a, b])
    tiled = value_and_gradients(
        lambda: fn(a, b, extra_positives=extra, tiling="always", block_size=3, **options), [a, b]
    )
    assert_all_close(dense, tiled)


@pytest.mark.parametrize("name", list(objectives.OBJECTIVES))
def test_every_module_accepts_the_tiling_options(name):
    """``objectives.build(name, tiling=..., block_size=...)`` gives the dense module's value and gradients."""
    spec = {s.name: s for s in objectives.available()}[name]
    assert {"tiling", "block_size", "memory_budget"} <= set(spec.defaults)
    params = {"num_samples": 20} if spec.stateful else {}
    dense = objectives.build(name, tiling="never", **params).double()
    tiled = objectives.build(name, tiling="always", block_size=3, **params).double()
    a, b = features(6)
    call = {"index": torch.arange(6)} if spec.stateful else {}
    if spec.stateful:
        dense.set_epoch(10)
        tiled.set_epoch(10)
    tensors = [a, b, *dense.parameters()]
    expected = value_and_gradients(lambda: dense(a, b, **call), tensors)
    got = value_and_gradients(lambda: tiled(a, b, **call), [a, b, *tiled.parameters()])
    assert_all_close(expected, got)


def state_of(objective):
    state = objective.state
    return {
        (name, side): state.gather(name, side, torch.arange(state.sizes[side])) for name, side in state_keys(objective)
    }


def state_keys(objective):
    return list(objective.state.tensors)


@pytest.mark.parametrize("name", STATEFUL)
@pytest.mark.parametrize("pairing", ["cross", "two_view"])
@pytest.mark.parametrize(("temperature", "engine_path"), PATHS, ids=PATH_IDS, indirect=["engine_path"])
def test_global_objectives_equal_dense_in_value_gradients_and_state(name, pairing, temperature, engine_path):
    """Several steps with every update running (NUCLR's zeta past its frozen epochs, iSogCLR's temperatures)."""
    options = {"num_samples": 23, "pairing": pairing, "temperature": temperature}
    if name == "isogclr":
        options.update(temperature_min=min(0.01, temperature), temperature_lr=0.05)
    dense = objectives.build(name, tiling="never", **options)
    tiled = objectives.build(name, tiling="always", block_size=4, **options)
    for objective in (dense, tiled):
        objective.set_epoch(10)
    generator = torch.Generator().manual_seed(3)
    for step in range(4):
        batch = 7 if step % 2 else 2
        a, b = features(batch, seed=step, duplicate=batch > 2)
        index = torch.randperm(23, generator=generator)[:batch]
        expected = value_and_gradients(lambda: dense(a, b, index=index), [a, b])
        got = value_and_gradients(lambda: tiled(a, b, index=index), [a, b])
        assert_all_close(expected, got)
        want, have = state_of(dense), state_of(tiled)
        for key in want:
            torch.testing.assert_close(have[key], want[key], **EXACT, msg=f"state {key} at step {step}")
    assert engine_path.fast_path_taken() == engine_path.expects_fast_path(name)


def test_per_anchor_scales_and_offsets_with_gradients():
    """Both directions' own scales and offsets, all differentiated (beyond what the objectives need)."""
    a, b = features(7)
    row_scale = torch.rand(7, dtype=torch.float64).add(0.5).requires_grad_(True)
    column_scale = torch.rand(7, dtype=torch.float64).add(0.5).requires_grad_(True)
    offset_b = torch.randn(7, dtype=torch.float64, requires_grad=True)
    offset_a = torch.randn(7, dtype=torch.float64, requires_grad=True)
    tensors = [a, b, row_scale, column_scale, offset_a, offset_b]

    def loss(matrix):
        forward = matrix(a, b, row_scale, torch.arange(7), column_offset=offset_b)
        backward = forward.transposed(scale=column_scale, column_offset=offset_a)

        def rows(scores):
            return (
                scores.negative_logsumexp(1.0)
                + 0.3 * scores.negative_logsumexp(2.5)
                + scores.negative_mean_score()
                + 0.1 * scores.negative_sum(torch.sin)
            )

        return sum(r.sum() for r in fused_map(rows, [forward, backward]))

    dense = value_and_gradients(lambda: loss(ScoreMatrix), tensors)
    for block in (2, 3, 7):
        tiled = value_and_gradients(
            lambda: loss(lambda *args, **kw: TiledScoreMatrix(*args, tiling=Tiling("always", block), **kw)), tensors
        )
        assert_all_close(dense, tiled)


def test_rectangular_local_rows_against_gathered_columns():
    """A rank's rows against the gathered batch (distributed training): the ranks' rows make up the full loss."""
    a, b = features(12)
    world, share = 3, 4
    tensors = [a, b]
    expected = value_and_gradients(lambda: infonce_rows(ScoreMatrix(a, b, 2.0, torch.arange(12))).sum(), tensors)

    def tiled_total():
        total = 0.0
        for rank in range(world):
            rows = slice(rank * share, (rank + 1) * share)
            local = TiledScoreMatrix(
                a[rows], b, 2.0, torch.arange(rows.start, rows.stop), tiling=Tiling("always", block_size=5)
            )
            assert local.negative_slots == 11
            (loss,) = fused_map(infonce_rows, [local])
            total = total + loss.sum()
        return total

    assert_all_close(expected, value_and_gradients(tiled_total, tensors))


@pytest.mark.parametrize("engine_path", ["shared", "running-max"], indirect=True)
def test_rectangular_statistics_on_demand_and_column_logsumexp(engine_path):
    """Outside :func:`fused_map` each statistic is its own pass; the column log-sum-exp is value-only."""
    a, b = features(9)
    rows = slice(3, 6)
    offset = torch.randn(9, dtype=torch.float64)

    def dense():
        return ScoreMatrix(a[rows], b, 1.7, torch.arange(3, 6), column_offset=offset)

    tiled = TiledScoreMatrix(a[rows], b, 1.7, torch.arange(3, 6), column_offset=offset, tiling=Tiling("always", 2))
    for method, args in (
        ("positive_logit", ()),
        ("negative_logsumexp", (0.5,)),
        ("negative_sum", (torch.cos,)),
        ("negative_mean_score", ()),
    ):
        expected = value_and_gradients(lambda: getattr(dense(), method)(*args).sum(), [a, b])
        got = value_and_gradients(lambda: getattr(tiled, method)(*args).sum(), [a, b])
        assert_all_close(expected, got)
    dense = dense()
    row_offset = torch.randn(3, dtype=torch.float64)
    with torch.no_grad():
        expected = dense.negative_column_logsumexp(row_offset)
        got = tiled.negative_column_logsumexp(row_offset)
    torch.testing.assert_close(got, expected, **EXACT)
    with pytest.raises(ValueError, match="value-only"):
        tiled.negative_column_logsumexp(row_offset.requires_grad_(True))
    with pytest.raises(AttributeError, match=r"not its dense R x C matrices \(logits\)"):
        _ = tiled.logits
    assert engine_path.fast_path_taken() == engine_path.expects_fast_path("the on-demand log-sum-exp")


@pytest.mark.parametrize("policy", ["cpu", "cuda"])
@pytest.mark.parametrize("weight", [1.0, 2.0], ids=["gradient-exponentials", "own-exponentials"])
@pytest.mark.parametrize(
    "row_spread, lowest", [(1.0, None), (1000.0, None), (1.0, -1000.0)], ids=["narrow", "wide", "one-far-below"]
)
@pytest.mark.parametrize("engine_path", ["shared", "running-max"], indirect=True)
def test_column_logsumexp_after_backward_equals_the_dense_statistic(
    weight, row_spread, lowest, engine_path, policy, monkeypatch
):
    """Every way the backward pass accumulates a column statistic: under the CPU policy from the gradient's
    exponentials (a row loss on L(1)) or exponentials of its own (L(2) only) where the row offsets are narrow, by a
    running maximum where they are too wide or the policy is the CUDA one (which reads no spread); both directions
    of a cross pairing, with column offsets, at block sizes that do and do not divide. ``one-far-below``: one
    anchor's offset 1000 below the others', so that its positive's column sums only terms ``e^{-1000}`` below the
    largest factor, which shared factors ``e^{-r_i - max(-r)}`` would flush to zero (float64 stops near
    ``e^{-745}``): its spread refuses the shared way."""
    shared_tiles = []
    add_exponentials = columns.ColumnLogSumExp.add_exponentials
    monkeypatch.setattr(
        columns.ColumnLogSumExp,
        "add_exponentials",
        lambda self, tile, exps: shared_tiles.append(tile) or add_exponentials(self, tile, exps),
    )
    a, b = features(9)
    offset_a, offset_b = torch.randn(9, dtype=torch.float64), torch.randn(9, dtype=torch.float64)
    row_offsets = [
        row_spread * torch.rand(9, dtype=torch.float64, generator=torch.Generator().manual_seed(k)) for k in (1, 2)
    ]
    if lowest is not None:
        for row_offset in row_offsets:
            row_offset[0] = lowest
    dense = cross_pairing(a, b, 1.3, offset_a=offset_a, offset_b=offset_b)
    with torch.no_grad():
        expected = [scores.negative_column_logsumexp(r) for scores, r in zip(dense, row_offsets, strict=True)]
    for block in (2, 4, 9):
        tiling = Tiling("always", block, policy=policy)
        matrix = lambda *args, **kwargs: TiledScoreMatrix(*args, tiling=tiling, **kwargs)  # noqa: E731, B023
        tiled = cross_pairing(a, b, 1.3, offset_a=offset_a, offset_b=offset_b, matrix=matrix)
        rows = fused_map(lambda scores: scores.negative_logsumexp(weight).sum(), tiled)
        got = []
        assert column_logsumexp_after_backward(list(zip(tiled, row_offsets, strict=True)), got.extend)
        assert got == []  # nothing until the backward pass
        sum(rows).backward()
        assert len(got) == 2
        for have, want in zip(got, expected, strict=True):
            torch.testing.assert_close(have, want, **EXACT)
    assert engine_path.fast_path_taken() == engine_path.expects_fast_path("the log-sum-exp")
    assert bool(shared_tiles) == (policy == "cpu" and row_spread == 1.0 and lowest is None)


def test_column_logsumexp_after_backward_declines_without_a_backward_pass():
    """Dense matrices, or tiled outputs that need no gradient: nothing is registered (the caller computes now)."""
    a, b = (x.detach() for x in features(6))
    row_offset = torch.zeros(6, dtype=torch.float64)
    dense = cross_pairing(a, b, 1.0)
    assert not column_logsumexp_after_backward([(dense[0], row_offset)], print)
    matrix = lambda *args, **kwargs: TiledScoreMatrix(*args, tiling=Tiling("always", 2), **kwargs)  # noqa: E731
    tiled = cross_pairing(a, b, 1.0, matrix=matrix)
    fused_map(lambda scores: scores.negative_logsumexp(), tiled)
    assert not column_logsumexp_after_backward([(tiled[0], row_offset)], print)


@pytest.mark.parametrize("pairing", ["cross", "two_view"])
def test_tiled_nuclr_writes_its_state_in_the_backward_pass(pairing, monkeypatch):
    """With features that need a gradient, the whole state update of a tiled NUCLR call is written by its backward
    pass, with no column pass of its own, once (a second backward of a kept graph writes nothing), and equals the
    update of a call without gradients (written at once, after a column pass per direction)."""
    passes = []
    column_logsumexp = TiledBatch.column_logsumexp
    monkeypatch.setattr(TiledBatch, "column_logsumexp", lambda *args: passes.append(1) or column_logsumexp(*args))
    options = {"num_samples": 23, "pairing": pairing, "tiling": "always", "block_size": 4}
    options["state_dtype"] = torch.float64
    eager, deferred = objectives.build("nuclr", **options), objectives.build("nuclr", **options)
    for objective in (eager, deferred):
        objective.set_epoch(10)
    a, b = features(7, seed=1, duplicate=True)
    index = torch.randperm(23, generator=torch.Generator().manual_seed(0))[:7]
    untouched = state_of(deferred)
    eager(a.detach(), b.detach(), index=index)
    assert len(passes) == (2 if pairing == "cross" else 1)
    loss = deferred(a, b, index=index)
    for key, values in state_of(deferred).items():
        torch.testing.assert_close(values, untouched[key], rtol=0, atol=0, msg=f"{key} before backward")
    written = state_of(eager)
    assert any(not torch.equal(written[key], untouched[key]) for key in written)
    for retain_graph in (True, False):
        loss.backward(retain_graph=retain_graph)
        for key, values in state_of(deferred).items():
            torch.testing.assert_close(values, written[key], **EXACT, msg=f"state {key}")
        assert deferred.state.scalar_values() == pytest.approx(eager.state.scalar_values(), rel=1e-12)
    assert len(passes) == (2 if pairing == "cross" else 1)


@pytest.mark.parametrize("per_anchor", [False, True], ids=["one-scale", "per-anchor-scales"])
@pytest.mark.parametrize("engine_path", ["shared", "running-max"], indirect=True)
def test_mean_score_and_per_anchor_scales_on_every_path(per_anchor, engine_path):
    """The negatives' mean score beside L(1) and L(2), one scale or one per anchor in each direction (iSogCLR),
    values and gradients (the mean's included) equal to the dense engine's."""
    a, b = features(9)
    generator = torch.Generator().manual_seed(4)
    scale_a = torch.rand(9, dtype=torch.float64, generator=generator).add(0.5) if per_anchor else 1.7
    scale_b = torch.rand(9, dtype=torch.float64, generator=generator).add(0.5) if per_anchor else None

    def total(matrix):
        pairs = cross_pairing(a, b, scale_a, scale_b=scale_b, matrix=matrix)

        def rows(scores):
            return (
                scores.negative_logsumexp()
                + 0.3 * scores.negative_logsumexp(2.0)
                + 0.7 * scores.negative_mean_score()
                - scores.positive_logit()
            ).sum()

        return sum(fused_map(rows, pairs))

    expected = value_and_gradients(lambda: total(ScoreMatrix), [a, b])
    for block in (2, 4, 9):
        tiled = lambda *args, **kwargs: TiledScoreMatrix(*args, tiling=Tiling("always", block), **kwargs)  # noqa: E731
        assert_all_close(expected, value_and_gradients(lambda: total(tiled), [a, b]))
    assert engine_path.fast_path_taken() == engine_path.expects_fast_path("the log-sum-exps")


def test_negative_sum_refuses_a_closure_over_a_tensor_with_gradient():
    a, b = features(4)
    bias = torch.tensor(0.5, dtype=torch.float64, requires_grad=True)
    tiled = TiledScoreMatrix(a, b, 1.0, torch.arange(4), tiling=Tiling("always"))
    with pytest.raises(ValueError, match="pass it as a parameter"):
        tiled.negative_sum(lambda s: F.logsigmoid(s + bias))
    expected = value_and_gradients(
        lambda: ScoreMatrix(a, b, 1.0, torch.arange(4)).negative_sum(lambda s, p: F.logsigmoid(s + p), bias).sum(),
        [a, b, bias],
    )
    got = value_and_gradients(lambda: tiled.negative_sum(lambda s, p: F.logsigmoid(s + p), bias).sum(), [a, b, bias])
    assert_all_close(expected, got)


def test_wpse_vectors_take_the_tiled_clip_path():
    """WPSE's loss is InfoNCE on Eq. 8 vectors (normalize=False): the tiled engine serves it unchanged."""
    generator = torch.Generator().manual_seed(0)
    points = torch.randn(6, 4, 3, generator=generator, dtype=torch.float64, requires_grad=True)
    weights = torch.rand(6, 4, generator=generator, dtype=torch.float64, requires_grad=True)
    texts = torch.randn(6, 5, 3, generator=generator, dtype=torch.float64)
    embed = WPSEmbedding(CombinedKernel(0.5, 0.5, GaussianKernel(0.75)), train_features=16)
    draw_state = embed.generator.get_state()
    loss = {}
    for tiling in ("never", "always"):
        embed.generator.set_state(draw_state)
        x, y = embed(
            WeightedPointSet(weights, F.normalize(points, dim=-1)),
            WeightedPointSet(torch.ones(6, 5, dtype=torch.float64), texts),
        )
        objective = objectives.build("infonce", normalize=False, tiling=tiling, block_size=4).double()
        loss[tiling] = value_and_gradients(lambda: objective(x, y), [points, weights])
    assert_all_close(loss["never"], loss["always"])


def test_float32_matches_dense_to_a_stated_tolerance():
    """float32, B = 300: values to 1e-5 relative, gradients to 1e-5 of their largest entry."""
    for name in ("infonce", "siglip", "hcl"):
        for temperature in (0.07, 0.01):
            a, b = (x.detach().float().requires_grad_(True) for x in features(300, dim=16, seed=1))
            fn = FUNCTIONS[name]
            dense = value_and_gradients(lambda: fn(a, b, temperature=temperature, tiling="never"), [a, b])
            tiled = value_and_gradients(
                lambda: fn(a, b, temperature=temperature, tiling="always", block_size=128), [a, b]
            )
            torch.testing.assert_close(tiled[0], dense[0], rtol=1e-5, atol=0.0)
            for want, have in zip(dense[1:], tiled[1:], strict=True):
                torch.testing.assert_close(have, want, rtol=0.0, atol=1e-5 * float(want.abs().max()))


def test_auto_block_respects_the_budget_and_balances_tiles():
    for budget in (2**20, 2**24, 2**28, DEFAULT_MEMORY_BUDGET):
        for dim in (16, 256, 4096):
            for dtype in (torch.float32, torch.float64):
                side = Tiling(memory_budget=budget).auto_block(dim, dtype)
                assert 1 <= side <= MAX_AUTO_BLOCK
                assert tile_bytes(side, side, dim, dtype) <= budget
                if side < MAX_AUTO_BLOCK:
                    assert tile_bytes(side + 1, side + 1, dim, dtype) > budget
    rows, cols = Tiling(block_size=1000).block_shape(2500, 1001, 8, torch.float32)
    assert (rows, cols) == (834, 501)  # three near-equal row tiles, two column tiles
    assert Tiling(block_size=7).block_shape(3, 3, 8, torch.float32) == (3, 3)


def test_auto_tiles_only_when_the_dense_matrix_exceeds_the_budget():
    a, b = features(300)
    small, large = Tiling(memory_budget=2**20), Tiling(memory_budget=2**30)
    assert small.use_tiles(300, 300, torch.float64) and not large.use_tiles(300, 300, torch.float64)
    for tiling, kind in ((small, TiledScoreMatrix), (large, ScoreMatrix)):
        matrices = objectives.base.score_matrices(a, b, temperature=0.1, pairing="cross", tiling=tiling)
        assert type(matrices[0]) is kind
    assert not Tiling("never", memory_budget=2**20).use_tiles(10**6, 10**6, torch.float32)
    assert Tiling("always").use_tiles(2, 2, torch.float32)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"tiling": "sometimes"}, "tiling must be one of 'auto', 'always', 'never', 'triton'"),
        ({"block_size": 0}, "block_size must be an integer >= 1"),
        ({"block_size": 2.5}, "block_size must be an integer >= 1"),
        ({"memory_budget": 1000}, "memory_budget must be an integer >= 1048576"),
        ({"memory_budget": True}, "memory_budget must be an integer >= 1048576"),
    ],
)
def test_bad_options_raise_naming_the_option_and_its_range(options, message):
    a, b = features(4)
    with pytest.raises(ValueError, match=message):
        functional.infonce(a, b, **options)
    with pytest.raises(ValueError, match=message):
        objectives.build("siglip", **options)
    with pytest.raises(ValueError, match=message):
        objectives.build("nuclr", num_samples=10, **options)


def test_cross_pairing_accepts_a_matrix_factory_and_shares_one_pass():
    a, b = features(5)
    forward, backward = cross_pairing(
        a, b, 2.0, matrix=lambda *x, **k: TiledScoreMatrix(*x, tiling=Tiling("always"), **k)
    )
    assert forward._batch is backward._batch
    dense = cross_pairing(a, b, 2.0)
    got = fused_map(infonce_rows, [forward, backward])
    expected = [infonce_rows(m) for m in dense]
    assert_all_close(expected, got)


PEAK_SCRIPT = textwrap.dedent(
    """
    import resource, sys, torch
    torch.manual_seed(0)
    from uncurated.objectives import functional
    batch = int(sys.argv[1])
    a = torch.randn(batch, 32, requires_grad=True)
    b = torch.randn(batch, 32, requires_grad=True)
    functional.infonce(a[:64], b[:64], tiling="always", block_size=1024).backward()  # warm up the allocator
    before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
    functional.infonce(a, b, tiling="always", block_size=1024).backward()
    print(resource.getrusage(resource.RUSAGE_SELF).ru_maxrss - before)
    """
)


@pytest.mark.slow
def test_peak_memory_of_the_tiled_path_grows_linearly():
    """Peak memory above the inputs at B and 4B: a quadratic path would grow 16-fold, this one at most 4-fold plus
    slack."""

    def peak_kib(batch):
        done = subprocess.run(
            [sys.executable, "-c", PEAK_SCRIPT, str(batch)], capture_output=True, text=True, check=True
        )
        return int(done.stdout.strip().splitlines()[-1])

    small, large = peak_kib(4096), peak_kib(16384)
    dense_kib = 16384 * 16384 * 4 / 1024  # one float32 score matrix at the large size
    assert large < dense_kib / 8, (small, large)
    assert large <= 6 * max(small, 1024), (small, large)


class FeatureSizedBuffers(TorchDispatchMode):
    """Adds up the bytes of every new tensor of at least ``numel`` elements made by an operator run under it.

    A storage counts once however many of an operator's outputs view it; views and in-place results of
    earlier tensors are the operator's inputs and never count. (Remembering addresses across operators
    would undercount: the allocator hands a freed buffer's address to the next one.)
    """

    def __init__(self, numel):
        super().__init__()
        self.numel, self.bytes = numel, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        flat = lambda tree: [t for t in tree_flatten(tree)[0] if isinstance(t, torch.Tensor)]  # noqa: E731
        seen = {t.untyped_storage().data_ptr() for t in flat((args, kwargs))}
        out = func(*args, **(kwargs or {}))
        for tensor in flat(out):
            pointer = tensor.untyped_storage().data_ptr()
            if tensor.numel() >= self.numel and pointer not in seen:
                seen.add(pointer)
                self.bytes += tensor.untyped_storage().nbytes()
        return out


@pytest.mark.parametrize("pairing, bound", [("two_view", 12), ("cross", 16)])
def test_the_tiled_backward_makes_few_buffers_the_size_of_the_features(monkeypatch, pairing, bound):
    """With micro-batches the (B, d) buffers are what grows with B. The backward pass of tiled CLIP
    makes at most ``bound`` of them in all, the features' gradients included (it made 38 and 32 before the
    normalization, the positives' products and the tile gradients' accumulation were made lean)."""
    from uncurated.objectives.tiled import positives

    monkeypatch.setattr(positives, "CHUNK_ROWS", 128)
    batch, dim = 512, 64
    a, b = (torch.randn(batch, dim, requires_grad=True) for _ in range(2))
    loss = objectives.build("infonce", tiling="always", block_size=64, pairing=pairing)(a, b)
    with FeatureSizedBuffers(batch * dim) as counted:
        loss.backward()
    assert counted.bytes <= bound * batch * dim * 4, counted.bytes / (batch * dim * 4)


def test_the_automatic_tile_never_exceeds_the_cap_at_any_batch():
    for batch in (1, 1000, 4096, 16384, 65536, 10**6):
        for dtype in (torch.bfloat16, torch.float32, torch.float64):
            rows, cols = Tiling().block_shape(batch, batch, 256, dtype)
            assert max(rows, cols) <= MAX_AUTO_BLOCK == 1024


@pytest.mark.parametrize("rows", [5, 4100])
def test_positive_products_are_the_rowwise_products_with_their_gradients(rows):
    from uncurated.objectives.tiled.positives import positive_products

    a, b = (torch.randn(rows, 3, dtype=torch.float64, requires_grad=True) for _ in range(2))
    columns = torch.randperm(rows)
    expected = (a * b[columns]).sum(1)
    assert torch.allclose(positive_products(a, b, columns, torch.float64), expected, **EXACT)
    weights = torch.randn(rows, dtype=torch.float64)
    got = torch.autograd.grad((positive_products(a, b, columns, torch.float64) * weights).sum(), (a, b))
    want = torch.autograd.grad((expected * weights).sum(), (a, b))
    assert all(torch.allclose(g, w, **EXACT) for g, w in zip(got, want, strict=True))
    views = torch.cat([a, b])  # one tensor as anchors and candidates (two views): one gradient buffer
    roll = (torch.arange(2 * rows) + rows) % (2 * rows)
    got = torch.autograd.grad((positive_products(views, views, roll, torch.float64)).sum(), (a, b))
    want = torch.autograd.grad((views * views[roll]).sum(), (a, b))
    assert all(torch.allclose(g, w, **EXACT) for g, w in zip(got, want, strict=True))


def test_l2_normalize_equals_f_normalize_in_value_and_gradient():
    """Each of the tensors one node normalizes, in value and gradient, a row below eps included."""
    from uncurated.objectives.base import l2_normalize

    x = torch.randn(6, 5, dtype=torch.float64)
    x[2] = 1e-14  # below eps: the norm is the constant eps
    x.requires_grad_()
    z = torch.randn(3, 5, dtype=torch.float64, requires_grad=True)
    weights = torch.randn(6, 5, dtype=torch.float64), torch.randn(3, 5, dtype=torch.float64)
    normalized = l2_normalize(x, z)
    for got, want in zip(normalized, (F.normalize(x, dim=-1), F.normalize(z, dim=-1)), strict=True):
        assert torch.allclose(got, want, **EXACT)
    got = torch.autograd.grad(sum((y * w).sum() for y, w in zip(normalized, weights, strict=True)), (x, z))
    reference = (F.normalize(x, dim=-1), F.normalize(z, dim=-1))
    want = torch.autograd.grad(sum((y * w).sum() for y, w in zip(reference, weights, strict=True)), (x, z))
    assert all(torch.allclose(g, w, **EXACT) for g, w in zip(got, want, strict=True))
    half = torch.randn(4, 8).bfloat16().requires_grad_()
    (out,) = l2_normalize(half)
    out.sum().backward()
    assert out.dtype == half.grad.dtype == torch.bfloat16
