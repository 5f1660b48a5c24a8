"""Zero-shot classification from prompt-ensembled class embeddings (CLIP protocol)."""

import math

import pytest
import torch
import torch.nn.functional as F

from uncurated.evaluate import ZeroShotAccuracy, prompt_ensemble, zero_shot_accuracy


def test_prompt_ensemble_normalizes_each_prompt_then_averages_then_renormalizes():
    generator = torch.Generator().manual_seed(0)
    prompts = [torch.randn(count, 7, generator=generator) * scale for count, scale in ((1, 5.0), (3, 0.1), (4, 2.0))]
    expected = []
    for group in prompts:
        mean = sum(row / row.norm() for row in group.double()) / len(group)
        expected.append(mean / mean.norm())
    assert prompt_ensemble(prompts).numpy() == pytest.approx(torch.stack(expected).numpy(), abs=1e-12)
    # Averaging before normalizing would weight the long prompts more and give other directions.
    plain = F.normalize(torch.stack([group.double().mean(0) for group in prompts]), dim=1)
    assert not torch.allclose(prompt_ensemble(prompts), plain, atol=1e-3)


def test_prompt_ensemble_accepts_a_class_by_prompt_tensor():
    stacked = torch.randn(4, 3, 5)
    assert torch.equal(prompt_ensemble(stacked), prompt_ensemble(list(stacked)))


def hand_made_case():
    """Six classes along the axes; images whose scores rank the classes in a known order."""
    prompts = [torch.stack([10.0 * axis, 0.1 * axis]) for axis in torch.eye(6)]
    descending = torch.tensor([5.0, 4.0, 3.0, 2.0, 1.0, 0.0])
    images = torch.stack([descending, descending, descending, descending.flip(0)])
    # Ranks of the true class: 1st (hit), 2nd (top-5 hit), 6th (miss), 2nd (top-5 hit).
    labels = torch.tensor([0, 1, 5, 4])
    return images, prompts, labels


def test_zero_shot_top1_and_top5_on_hand_made_embeddings():
    images, prompts, labels = hand_made_case()
    result = zero_shot_accuracy(images, prompts, labels)
    assert isinstance(result, ZeroShotAccuracy)
    assert result.accuracy == pytest.approx(0.25)
    assert result.top5_accuracy == pytest.approx(0.75)
    per_class = result.per_class_accuracy
    assert [per_class[c] for c in (0, 1, 4, 5)] == [1.0, 0.0, 0.0, 0.0]
    assert math.isnan(per_class[2]) and math.isnan(per_class[3])
    assert result.mean_per_class_accuracy == pytest.approx(0.25)
    expected_scores = F.normalize(images.double(), dim=1)  # the class embeddings are the axes
    assert result.scores.shape == (4, 6)
    assert result.scores.numpy() == pytest.approx(expected_scores.numpy(), abs=1e-12)


def test_dot_product_zero_shot_averages_prompts_without_normalizing():
    """The point-set protocol (Uesaka et al. 2025): a class is the plain mean of its prompt vectors, an image
    scores the dot product; norms then matter, unlike the cosine protocol's."""
    generator = torch.Generator().manual_seed(1)
    prompts = [torch.randn(count, 5, generator=generator) * scale for count, scale in ((2, 3.0), (3, 0.2), (4, 1.0))]
    images = torch.randn(40, 5, generator=generator)
    labels = torch.randint(0, 3, (40,), generator=generator)
    result = zero_shot_accuracy(images, prompts, labels, normalize=False)
    means = torch.stack([group.double().mean(dim=0) for group in prompts])
    torch.testing.assert_close(result.scores, images.double() @ means.T)
    assert result.accuracy == pytest.approx(float((result.scores.argmax(1) == labels).double().mean()))
    # Bilinearity: the score with the class mean is the mean score over the class's prompts.
    torch.testing.assert_close(result.scores[:, 1], (images.double() @ prompts[1].double().T).mean(dim=1))
    cosine = zero_shot_accuracy(images, prompts, labels)
    assert not torch.equal(cosine.scores.argmax(1), result.scores.argmax(1))


def test_top5_is_reported_only_with_at_least_five_classes():
    images = torch.eye(4)
    labels = torch.tensor([0, 1, 2, 0])
    prompts = [row[None] for row in torch.eye(4)]
    result = zero_shot_accuracy(images, prompts, labels)
    assert result.top5_accuracy is None
    assert result.accuracy == pytest.approx(0.75)
    five = [row[None] for row in torch.eye(5)[:, :4]]  # the fifth class is the zero vector: not allowed
    with pytest.raises(ValueError, match=r"classes \[4\] average to the zero vector"):
        zero_shot_accuracy(images, five, labels)
    prompts5 = [row[None] for row in torch.eye(5)]
    result5 = zero_shot_accuracy(torch.eye(5)[:4], prompts5, labels)
    assert result5.top5_accuracy == 1.0  # every class is among the five


def test_zero_shot_bad_input_is_rejected():
    images, prompts, labels = hand_made_case()
    with pytest.raises(ValueError, match=r"class_prompts must hold at least one class"):
        zero_shot_accuracy(images, [], labels)
    with pytest.raises(ValueError, match=r"class_prompts\[2\] must have shape \(rows, dim\) with rows, dim >= 1"):
        zero_shot_accuracy(images, prompts[:2] + [torch.empty(0, 6)] + prompts[3:], labels)
    with pytest.raises(ValueError, match=r"class_prompts\[1\] must have 6 columns like class_prompts\[0\]"):
        prompt_ensemble([prompts[0], prompts[1][:, :5]])
    with pytest.raises(ValueError, match=r"labels must hold indices in \[0, 5\]"):
        zero_shot_accuracy(images, prompts, torch.tensor([0, 1, 6, 2]))
    with pytest.raises(ValueError, match=r"labels must have shape \(4,\)"):
        zero_shot_accuracy(images, prompts, labels[:3])
    with pytest.raises(ValueError, match=r"image_features must have 6 columns like the class prompts"):
        zero_shot_accuracy(images[:, :5], prompts, labels)
    with pytest.raises(ValueError, match=r"image_features contains non-finite"):
        zero_shot_accuracy(images * math.nan, prompts, labels)
    with pytest.raises(ValueError, match=r"\(K, P, d\) tensor"):
        prompt_ensemble(torch.randn(4, 6))
