"""Diagnostics the objectives record where they compute them (what the trainer logs beside the loss)."""

import pytest
import torch

from uncurated import objectives


def dcl_clamped_fraction(objective, a, b):
    """The fraction of anchors at DCL's floor in a call on ``(a, b)``; ``None`` if the objective has no such
    diagnostic."""
    objective(a, b)
    return objective.diagnostics.get("clamped_fraction")


def test_dcl_clamped_fraction_matches_the_definition_and_is_none_for_other_objectives():
    """DCL records the fraction of anchors at its floor where it computes its estimate, for both pairings."""
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(32, 8, generator=generator), torch.randn(32, 8, generator=generator)
    assert dcl_clamped_fraction(objectives.build("infonce"), a, b) is None
    # Aligned views at a low temperature: the positive dominates, so most brackets fall below the floor.
    aligned = dcl_clamped_fraction(objectives.build("dcl", temperature=0.1, tau_plus=0.5), a, a)
    assert aligned > 0.9
    assert dcl_clamped_fraction(objectives.build("dcl", temperature=0.5, tau_plus=0.1), a, b) == 0.0
    cross = dcl_clamped_fraction(objectives.build("dcl", pairing="cross", temperature=0.1, tau_plus=0.5), a, a)
    assert 0.9 < cross <= 1.0
    # The definition, for the two-view pairing: 2B anchors, 2B - 2 negatives, one positive.
    loss = objectives.build("dcl", temperature=0.2, tau_plus=0.3)
    z = torch.nn.functional.normalize(torch.cat([a, 0.5 * a + b]), dim=1)
    scores = z @ z.T / 0.2
    size = 32
    clamped = 0
    for i in range(2 * size):
        positive = (i + size) % (2 * size)
        negatives = [scores[i, j].exp() for j in range(2 * size) if j not in (i, positive)]
        bracket = (sum(negatives) / len(negatives) - 0.3 * scores[i, positive].exp()) / 0.7
        clamped += bool(bracket <= torch.exp(torch.tensor(-1 / 0.2)))
    assert dcl_clamped_fraction(loss, a, 0.5 * a + b) == pytest.approx(clamped / (2 * size))


def test_the_trainer_columns_are_named_after_the_objective():
    assert objectives.build("dcl").diagnostic_names == ("clamped_fraction",)
    assert objectives.build("hcl").diagnostic_names == ("clamped_fraction",)
    assert objectives.build("infonce").diagnostic_names == ()
