"""Debiasing by calibrated projection (thesis Ch. 7): projections, metrics, prompt sets."""

from __future__ import annotations

import json
import math
from itertools import pairwise

import pytest
import torch

from uncurated.data import CLASS_NAMES
from uncurated.debias import (
    available_prompt_sets,
    calibrated_projection,
    calibrated_projection_svd,
    calibration_matrix,
    equalize,
    group_robustness,
    load_prompts,
    max_skew_at_k,
    mean_pair_distance,
    orthogonal_projection,
    parity_discrepancy,
    project,
)

D = 16


def unit_rows(n: int, seed: int, d: int = D) -> torch.Tensor:
    x = torch.randn(n, d, generator=torch.Generator().manual_seed(seed), dtype=torch.float64)
    return x / x.norm(dim=1, keepdim=True)


@pytest.fixture
def spurious() -> torch.Tensor:
    return unit_rows(4, seed=0).T  # A: (d, m)


@pytest.fixture
def pairs() -> tuple[torch.Tensor, torch.Tensor]:
    return unit_rows(6, seed=1), unit_rows(6, seed=2)


def test_orthogonal_projection_is_symmetric_idempotent_and_annihilates_A(spurious):
    P0 = orthogonal_projection(spurious)
    torch.testing.assert_close(P0 @ P0, P0, atol=1e-12, rtol=0)
    torch.testing.assert_close(P0, P0.T, atol=1e-12, rtol=0)
    assert (P0 @ spurious).abs().max() < 1e-12
    gram = spurious.T @ spurious
    explicit = torch.eye(D, dtype=torch.float64) - spurious @ torch.linalg.solve(gram, spurious.T)
    torch.testing.assert_close(P0, explicit, atol=1e-12, rtol=0)


def test_closed_form_zeroes_the_calibration_gradient(spurious, pairs):
    z_i, z_j = pairs
    lam = 1000.0
    P0 = orthogonal_projection(spurious)
    P = calibrated_projection(P0, z_i, z_j, lam).requires_grad_(True)
    loss = ((P - P0) ** 2).sum() + lam / z_i.shape[0] * ((z_i - z_j) @ P.T).pow(2).sum()
    (gradient,) = torch.autograd.grad(loss, P)
    assert gradient.abs().max() < 1e-9


def test_lemma_7_2_relation(spurious, pairs):
    z_i, z_j = pairs
    P0 = orthogonal_projection(spurious)
    z0 = unit_rows(3, seed=3)
    P_star = calibrated_projection(P0, z_i, z_j, 700.0)
    z_star = equalize(z0, z_i, z_j, 700.0)
    torch.testing.assert_close(z_star @ P0.T, z0 @ P_star.T, atol=1e-12, rtol=0)
    torch.testing.assert_close(equalize(z0[0], z_i, z_j, 700.0), z_star[0])


@pytest.mark.parametrize("n_pairs", [3, 40], ids=["differences-span-a-subspace", "differences-span-the-space"])
def test_svd_form_equals_inverse_form(spurious, n_pairs):
    z_i, z_j = unit_rows(n_pairs, seed=4), unit_rows(n_pairs, seed=5)
    lam = 250.0
    P0 = orthogonal_projection(spurious)
    differences = z_i - z_j
    G = torch.eye(D, dtype=torch.float64) + lam / n_pairs * differences.T @ differences
    torch.testing.assert_close(calibration_matrix(z_i, z_j, lam), torch.linalg.inv(G), atol=1e-12, rtol=0)
    torch.testing.assert_close(
        calibrated_projection_svd(P0, z_i, z_j, lam), calibrated_projection(P0, z_i, z_j, lam), atol=1e-12, rtol=0
    )
    if n_pairs < D:  # directions no pair moves along are left untouched
        U, _, _ = torch.linalg.svd(differences.T, full_matrices=False)
        complement = torch.eye(D, dtype=torch.float64) - U @ U.T
        torch.testing.assert_close(calibration_matrix(z_i, z_j, lam) @ complement, complement, atol=1e-12, rtol=0)


def test_pair_distances_shrink_as_lambda_grows(spurious, pairs):
    z_i, z_j = pairs
    P0 = orthogonal_projection(spurious)
    lambdas = (0, 1, 10, 100, 1000)
    distances = [mean_pair_distance(calibrated_projection(P0, z_i, z_j, lam), z_i, z_j) for lam in lambdas]
    assert distances[0] == pytest.approx(mean_pair_distance(P0, z_i, z_j))
    assert all(later < earlier for earlier, later in pairwise(distances))
    assert distances[-1] < 0.05 * distances[0]


def test_project_applies_rows_and_renormalizes(spurious):
    P0 = orthogonal_projection(spurious)
    x = unit_rows(5, seed=6)
    projected = project(x, P0)
    torch.testing.assert_close(projected.norm(dim=1), torch.ones(5, dtype=torch.float64))
    torch.testing.assert_close(project(x, P0, renormalize=False), (P0 @ x.T).T)
    assert (projected @ spurious).abs().max() < 1e-12


def test_bad_projection_input_raises(spurious, pairs):
    z_i, z_j = pairs
    P0 = orthogonal_projection(spurious)
    deficient = torch.cat([spurious, spurious[:, :1] + spurious[:, 1:2]], dim=1)
    with pytest.raises(ValueError, match=r"A must have full column rank 5.*numerical rank 4"):
        orthogonal_projection(deficient)
    with pytest.raises(ValueError, match="pair set S is empty"):
        calibrated_projection(P0, z_i[:0], z_j[:0])
    with pytest.raises(ValueError, match=r"lam must be in \[0, inf\]"):
        calibrated_projection(P0, z_i, z_j, lam=-1.0)
    with pytest.raises(ValueError, match="lam must be"):
        equalize(z_i[0], z_i, z_j, lam=-1.0)
    with pytest.raises(ValueError, match="z_i and z_j must have dim 16"):
        calibrated_projection(P0, z_i[:, :8], z_j[:, :8])
    with pytest.raises(ValueError, match="same shape"):
        calibration_matrix(z_i, z_j[:3])
    with pytest.raises(ValueError, match=r"embeddings must have shape \(n, 16\)"):
        project(z_i[:, :8], P0)


def test_group_robustness_on_a_hand_made_example():
    # group 0: 4/4 correct, group 1: 1/2, group 2: 3/4  -> 8/10 overall
    labels = torch.tensor([0, 0, 0, 0, 1, 1, 1, 1, 1, 1])
    groups = torch.tensor([0, 0, 0, 0, 1, 1, 2, 2, 2, 2])
    predictions = torch.tensor([0, 0, 0, 0, 1, 0, 1, 1, 1, 0])
    result = group_robustness(predictions, labels, groups)
    assert result.per_group == {0: 1.0, 1: 0.5, 2: 0.75}
    assert result.worst_group == 0.5
    assert result.average == pytest.approx(0.8)  # over samples, not the 0.75 mean of the groups
    assert result.gap == pytest.approx(0.3)
    with pytest.raises(ValueError, match="labels must have length 10"):
        group_robustness(predictions, labels[:3], groups)


@pytest.mark.parametrize("num_attributes", [2, 5])
def test_max_skew_and_discrepancy_extremes(num_attributes):
    balanced = torch.arange(num_attributes).repeat(20)
    one_attribute = torch.full((20,), num_attributes - 1)
    assert max_skew_at_k(balanced, num_attributes) == pytest.approx(0.0, abs=1e-12)
    assert max_skew_at_k(one_attribute, num_attributes) == pytest.approx(math.log(num_attributes))
    assert parity_discrepancy(balanced, num_attributes) == pytest.approx(0.0, abs=1e-12)
    assert parity_discrepancy(one_attribute, num_attributes) == pytest.approx(math.sqrt(1 - 1 / num_attributes))


def test_attribute_metrics_reject_bad_input():
    with pytest.raises(ValueError, match=r"attributes must be ids in \[0, 1\]"):
        max_skew_at_k(torch.tensor([0, 2]), 2)
    with pytest.raises(ValueError, match="num_attributes must be an integer >= 2"):
        parity_discrepancy(torch.tensor([0, 0]), 1)


def test_mean_pair_distance_identity_is_the_raw_distance(pairs):
    z_i, z_j = pairs
    expected = float((z_i - z_j).norm(dim=1).mean())
    assert mean_pair_distance(torch.eye(D, dtype=torch.float64), z_i, z_j) == pytest.approx(expected)


def test_builtin_prompt_sets_load_with_prompts_for_every_class():
    assert set(available_prompt_sets()) >= {
        "waterbirds",
        "celeba",
        "professions-gender",
        "professions-race",
        "fashion-captions",
    }
    for name in available_prompt_sets():
        prompts = load_prompts(name)
        assert prompts.classes
        assert all(len(prompts.pair_prompts[c]) >= 2 for c in prompts.classes)
        assert all(c in prompts.class_prompts for c in prompts.classes) or not prompts.class_prompts
        assert len(prompts.pairs()) >= len(prompts.classes)


def test_prompt_sets_match_the_thesis_tables():
    waterbirds = load_prompts("waterbirds")
    assert len(waterbirds.spurious_prompts) == 8 and len(waterbirds.pairs()) == 20  # all 10 pairs of 5, per class
    celeba = load_prompts("celeba")
    assert celeba.pairs() == [
        ("A photo of a male celebrity with dark hair.", "A photo of a female celebrity with dark hair."),
        ("A photo of a male celebrity with blond hair.", "A photo of a female celebrity with blond hair."),
    ]
    gender = load_prompts("professions-gender")
    assert len(gender.splits["train"]) == 80 and len(gender.splits["test"]) == 20
    assert ("A photo of a male doctor.", "A photo of a female doctor.") in gender.split("train").pairs()
    assert not set(gender.splits["train"]) & set(gender.splits["test"])
    assert len(load_prompts("professions-race").split("test").pairs()) == 20 * 10
    fashion = load_prompts("fashion-captions")
    assert fashion.classes == CLASS_NAMES
    assert fashion.pair_prompts["Bag"] == (
        "a photo of a Bag on a dark background",
        "a photo of a Bag on a light background",
    )


def test_user_prompt_file_overrides_and_missing_prompts_raise(tmp_path):
    path = tmp_path / "mine.json"
    cat, dog = ["a cat indoors", "a cat outdoors"], ["a dog indoors", "a dog outdoors"]
    path.write_text(json.dumps({"classes": ["cat", "dog"], "pair_prompts": {"cat": cat, "dog": dog}}))
    mine = load_prompts(path)
    assert mine.name == "mine" and len(mine.pairs()) == 2

    path.write_text(json.dumps({"classes": ["cat", "dog"], "pair_prompts": {"cat": cat}}))
    with pytest.raises(ValueError, match=r"pair_prompts has no prompts for classes \['dog'\]"):
        load_prompts(path)
    path.write_text(json.dumps({"classes": ["cat"], "pair_prompts": {"cat": ["a cat indoors"]}}))
    with pytest.raises(ValueError, match="at least two distinct pair prompts"):
        load_prompts(path)
    with pytest.raises(ValueError, match="source must be a prompt file or one of"):
        load_prompts("no-such-set")
    with pytest.raises(ValueError, match="split must be one of"):
        load_prompts("waterbirds").split("train")
