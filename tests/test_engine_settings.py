"""The engine's six settings are one checked value, shared by every objective and the training configuration; a
refused choice reads the same in the argument checks and in the configuration."""

from __future__ import annotations

import pytest

from uncurated import objectives
from uncurated.checks import check_choice, choice_message
from uncurated.engine_settings import NAMES, EngineSettings
from uncurated.train.config import ConfigError, load_config

NON_DEFAULT = {
    "tiling": "always",
    "block_size": 7,
    "memory_budget": 2**21,
    "tile_policy": "cuda",
    "compile": False,
    "distributed": False,
}


@pytest.mark.parametrize(
    ("setting", "value", "message"),
    [
        ("tiling", "alway", r"tiling must be one of 'auto', 'always', 'never', 'triton'; got 'alway' \(did you mean"),
        ("block_size", 0, r"block_size must be an integer >= 1, got 0"),
        ("block_size", 2.0, r"block_size must be an integer >= 1, got 2.0"),
        ("memory_budget", 2**20 - 1, r"memory_budget must be an integer >= 1048576, got 1048575"),
        ("tile_policy", "gpu", r"tile_policy must be one of 'auto', 'cpu', 'cuda'; got 'gpu'"),
        ("compile", "often", r"compile must be true, false or None \(compile on CUDA\), got 'often'"),
        ("distributed", 1, r"distributed must be true, false or None .*, got 1"),
    ],
)
def test_each_setting_is_checked_where_it_is_declared(setting, value, message):
    with pytest.raises(ValueError, match=message):
        EngineSettings(**{setting: value})
    with pytest.raises(ValueError, match=message):
        objectives.InfoNCE(**{setting: value})
    with pytest.raises(ValueError, match=message):
        objectives.SogCLR(10, **{setting: value})
    with pytest.raises(ConfigError, match=f"objective.{message}"):
        load_config([f"objective.{setting}={value}"])


def test_both_families_of_objectives_hold_the_settings_as_one_value():
    assert set(NAMES) == set(NON_DEFAULT)
    settings = EngineSettings(**NON_DEFAULT)
    for objective in (objectives.DCL(**NON_DEFAULT), objectives.NUCLR(10, **NON_DEFAULT)):
        assert objective.engine == settings
        assert objective.distributed is False and objective.tiling.block_size == 7 and objective.tiling.policy == "cuda"
        assert {key: objective.defaults()[key] for key in NAMES} == EngineSettings().keywords()
    assert settings.changed() == NON_DEFAULT and EngineSettings().changed() == {}


def test_a_keyword_that_is_no_parameter_is_refused_naming_the_closest_setting():
    with pytest.raises(
        TypeError, match=r"InfoNCE\(\) got an unexpected keyword argument 'tilling' \(did you mean 'tiling'"
    ):
        objectives.InfoNCE(tilling="always")
    # A global objective passes on the engine's settings alone, not the batch objectives' learnable temperature.
    with pytest.raises(TypeError, match=r"SogCLR\(\) got an unexpected keyword argument 'learnable'"):
        objectives.SogCLR(10, learnable=True)
    with pytest.raises(TypeError, match="temperature_parametrization"):
        objectives.NUCLR(10, temperature_parametrization="identity")


def test_the_configuration_builds_the_objective_from_its_settings():
    from uncurated.train.builders import build_objective

    config = load_config(["preset=digits", "objective.tiling=never", "objective.block_size=5", "compile=false"])
    assert config.engine_settings() == EngineSettings(tiling="never", block_size=5, compile=False)
    assert build_objective(config, list(range(10))).engine == config.engine_settings()


def test_a_refused_choice_reads_the_same_in_the_checks_and_the_configuration():
    expected = "pairing must be one of 'cross', 'two_view'; got 'two-view' (did you mean 'two_view'?)"
    assert choice_message("pairing", "two-view", ("cross", "two_view")) == expected
    with pytest.raises(ValueError) as refused:
        check_choice("pairing", "two-view", ("cross", "two_view"))
    assert str(refused.value) == expected
    with pytest.raises(ConfigError) as refused_key:
        load_config(["pipeline=two-view"])
    assert str(refused_key.value) == choice_message("pipeline", "two-view", ("two_view", "image_text"))
    assert choice_message("pairing", "zzz", ("cross", "two_view")).endswith("got 'zzz'")  # no close choice, no hint
