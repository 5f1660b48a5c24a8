import functools

import pytest
import torch


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same random state."""
    torch.manual_seed(0)


@pytest.fixture
def fast_probe(monkeypatch):
    """Linear probes with C fixed at 1, for tests about training or the bench rather than the probe's search."""
    from uncurated.evaluate import suite
    from uncurated.train import evaluation

    for module in (suite, evaluation):
        monkeypatch.setattr(module, "linear_probe", functools.partial(module.linear_probe, C=1.0))
