"""Agreement with a peer library and with the textbook formula."""

import pytest
import reference as ref
import torch
from pytorch_metric_learning.losses import NTXentLoss
from reference import random_batch

from uncurated.objectives import InfoNCE


@pytest.mark.parametrize("temperature", [0.07, 0.5, 1.0])
def test_nt_xent_equals_pytorch_metric_learning(temperature):
    a, b = random_batch(batch=16, dim=8, dtype=torch.float32)
    embeddings = torch.cat([a, b])
    labels = torch.arange(16).repeat(2)
    expected = NTXentLoss(temperature=temperature)(embeddings, labels)
    got = InfoNCE(temperature, pairing="two_view")(a, b)
    torch.testing.assert_close(got, expected, rtol=1e-5, atol=1e-5)


@pytest.mark.parametrize("reduction", ["mean", "sum"])
def test_clip_equals_two_cross_entropies(reduction):
    a, b = random_batch(batch=12, dim=8, dtype=torch.float32)
    got = InfoNCE(0.07, direction_reduction=reduction)(a, b)
    torch.testing.assert_close(got, ref.clip_two_cross_entropies(a, b, 0.07, reduction), rtol=1e-6, atol=1e-5)
