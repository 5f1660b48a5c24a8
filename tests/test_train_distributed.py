"""Two processes of half the batch each train exactly as one process of the whole batch."""

import pytest
import torch
from training import SMOKE, final_weights, logged_losses, torchrun_train

from uncurated.train import load_config, train


@pytest.mark.parametrize("objective", ["simclr", "sogclr"])
def test_two_processes_of_half_the_batch_match_one_process(tmp_path, objective):
    """gloo on CPU; an MLP without batch norm and no augmentation, so every sample's embedding is exact."""
    common = [
        *SMOKE,
        f"out={tmp_path}",
        "augment=none",
        "norm=none",
        "projection_layers=1",
        "epochs=0.3",
        "batch_size=64",
        f"objective={objective}",
    ]
    train(load_config([*common, "name=one"]))
    torchrun_train(*common, "name=two")
    one, two = final_weights(tmp_path / "one"), final_weights(tmp_path / "two")
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=1e-5, atol=1e-6, msg=name)
    assert logged_losses(tmp_path / "one") == pytest.approx(logged_losses(tmp_path / "two"), rel=1e-5)
