"""Replayed requests: later calls of a row loss skip the recording run, and a replay that no longer holds is caught."""

from __future__ import annotations

import torch

from uncurated import objectives
from uncurated.objectives.engine import cross_pairing
from uncurated.objectives.tiled import RecordedRequests, TiledScoreMatrix, Tiling, fused_map
from uncurated.objectives.tiled.kernels.transforms import negative_log_sigmoid


def tiled_pairs(a, b, scale=2.0):
    scale_b = scale if isinstance(scale, torch.Tensor) else None
    tiled = lambda *x, **k: TiledScoreMatrix(*x, tiling=Tiling("always"), **k)  # noqa: E731
    return cross_pairing(a, b, scale, scale_b=scale_b, matrix=tiled)


def features(batch=7, dim=5, seed=0):
    generator = torch.Generator().manual_seed(seed)
    return [torch.randn(batch, dim, generator=generator, dtype=torch.float64, requires_grad=True) for _ in "ab"]


class CountedRows:
    """``L_i(weight) - s_i``, counting its runs."""

    def __init__(self, weight=1.0):
        self.weight, self.runs = weight, 0

    def __call__(self, scores):
        self.runs += 1
        return scores.negative_logsumexp(self.weight) - scores.positive_logit()


def value_and_gradients(rows, a, b, matrices, recorded):
    value = sum(r.sum() for r in fused_map(rows, matrices, recorded=recorded))
    return [value.detach(), *torch.autograd.grad(value, [a, b])]


def dense(rows, a, b):
    value = sum(rows(m).sum() for m in cross_pairing(a, b, 2.0))
    return [value.detach(), *torch.autograd.grad(value, [a, b])]


def test_a_second_call_skips_the_recording_run_and_computes_the_same():
    a, b = features()
    rows, recorded = CountedRows(), RecordedRequests()
    first = value_and_gradients(rows, a, b, tiled_pairs(a, b), recorded)
    assert rows.runs == 4  # two directions, recorded and served
    second = value_and_gradients(rows, a, b, tiled_pairs(a, b), recorded)
    assert rows.runs == 6  # served only
    for want, got, have in zip(dense(rows, a, b), first, second, strict=True):
        torch.testing.assert_close(got, want, rtol=1e-12, atol=1e-12)
        torch.testing.assert_close(have, want, rtol=1e-12, atol=1e-12)


def test_a_row_loss_that_asks_for_another_statistic_is_recorded_afresh():
    a, b = features()
    rows, recorded = CountedRows(), RecordedRequests()
    value_and_gradients(rows, a, b, tiled_pairs(a, b), recorded)
    rows.weight, rows.runs = 0.5, 0
    got = value_and_gradients(rows, a, b, tiled_pairs(a, b), recorded)
    assert rows.runs == 1 + 2 + 2  # the replay caught at the first direction, then recorded and served
    for want, have in zip(dense(rows, a, b), got, strict=True):
        torch.testing.assert_close(have, want, rtol=1e-12, atol=1e-12)
    rows.runs = 0
    value_and_gradients(rows, a, b, tiled_pairs(a, b), recorded)
    assert rows.runs == 2  # the new requests replay


def test_a_batch_of_another_layout_is_recorded_for_itself():
    a, b = features()
    rows, recorded = CountedRows(), RecordedRequests()
    value_and_gradients(rows, a, b, tiled_pairs(a, b), recorded)
    rows.runs = 0
    per_anchor = torch.full((7,), 2.0, dtype=torch.float64)
    value_and_gradients(rows, a, b, tiled_pairs(a, b, per_anchor), recorded)
    assert rows.runs == 4


def test_negative_sums_are_recorded_on_every_call():
    """Their functions' parameters are the call's own tensors (SigLIP's bias), so they are never replayed."""
    a, b = features()
    bias = torch.tensor(-1.0, dtype=torch.float64, requires_grad=True)
    runs = []

    def rows(scores):
        runs.append(1)
        return scores.negative_sum(negative_log_sigmoid, bias) - scores.positive_logit()

    recorded = RecordedRequests()
    for _ in range(2):
        runs.clear()
        (value,) = fused_map(rows, tiled_pairs(a, b)[:1], recorded=recorded)
        assert len(runs) == 2
    want = rows(cross_pairing(a, b, 2.0)[0])
    torch.testing.assert_close(value, want, rtol=1e-12, atol=1e-12)


def test_an_objective_whose_setting_changes_between_calls_follows_it():
    """HCL's beta sets the log-sum-exp weights it asks for: changed after a call, the next call records afresh."""
    a, b = features(9)
    tiled, reference = (objectives.build("hcl", tiling=t, pairing="cross") for t in ("always", "never"))
    for beta in (0.5, 0.5, 2.0):
        tiled.beta = reference.beta = beta
        want, have = reference(a, b), tiled(a, b)
        torch.testing.assert_close(have, want, rtol=1e-10, atol=1e-10)
