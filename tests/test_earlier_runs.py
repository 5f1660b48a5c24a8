"""Runs saved by earlier versions load and resume as they trained: keys added since take the values those runs
trained with, not today's defaults."""

import pytest
import torch
import yaml

from uncurated.train import load_config, train
from uncurated.train.config import ConfigError
from uncurated.train.restore import load_run


def _digits(tmp_path, *extra: str) -> list[str]:
    # 1438 digits at batch 16: 0.02 epochs are 2 steps.
    return [
        "preset=digits",
        "epochs=0.02",
        "augment=none",
        "batch_size=16",
        "progress=false",
        "probe_baselines=false",
        "probe_train_size=64",
        f"out={tmp_path}",
        "name=earlier",
        *extra,
    ]


def _batch_norms(module: torch.nn.Module) -> int:
    return sum(isinstance(layer, torch.nn.BatchNorm1d) for layer in module.modules())


def test_a_norm_none_run_from_before_projection_norm_keeps_its_batch_norm_head(tmp_path):
    # Before projection_norm, norm=none left the two-layer projection head's batch norm in place.
    train(load_config(_digits(tmp_path, "norm=none", "projection_norm=batch")))
    path = tmp_path / "earlier" / "config.yaml"
    saved = yaml.safe_load(path.read_text())
    del saved["projection_norm"]
    path.write_text(yaml.safe_dump(saved))

    restored = load_run(tmp_path / "earlier")
    assert restored.config.projection_norm == "batch"
    assert _batch_norms(restored.model) == 1  # the head's; the MLP encoder has none with norm=none

    # Resumed from its config.yaml, the run keeps the head it trained with unless the command line changes it.
    with pytest.raises(ConfigError, match=r"projection_norm: 'batch' -> 'auto'"):
        train(load_config(_digits(tmp_path, "norm=none", "projection_norm=auto", "resume=true")))
    assert load_config(_digits(tmp_path, "norm=none", "resume=true")).projection_norm == "batch"
    report = train(load_config(_digits(tmp_path, "norm=none", "resume=true")))
    assert report["steps"] == 2


def test_projection_norm_auto_follows_norm_and_bad_values_are_named():
    from uncurated.train.builders.models import _projection

    for norm, expected in (("batch", 1), ("none", 0)):
        config = load_config(["preset=digits", f"norm={norm}"])
        assert _batch_norms(_projection(config, 8)) == expected
    assert _batch_norms(_projection(load_config(["preset=digits", "norm=none", "projection_norm=batch"]), 8)) == 1
    with pytest.raises(ConfigError, match="projection_norm must be one of 'auto', 'batch', 'none'; got 'layer'"):
        load_config(["projection_norm=layer"])
    with pytest.raises(ConfigError, match="norm must be one of 'batch', 'none'; got 'group'"):
        load_config(["norm=group"])
