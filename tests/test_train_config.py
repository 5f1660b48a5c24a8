"""The training configuration: keys checked one by one, the last value of a repeated key."""

import pytest

from uncurated.cli import main
from uncurated.train import ConfigError, load_config


def test_overrides_are_checked_key_by_key():
    config = load_config(["preset=digits", "lr=3e-4", "widths=[64, 32]", "objective=hcl", "objective.beta=0.5"])
    assert config.lr == 3e-4 and config.widths == [64, 32]
    assert config.objective_spec() == ("hcl", {"temperature": 0.5, "beta": 0.5})
    assert load_config(["preset=digits", "objective=clip"]).objective_spec()[1]["pairing"] == "cross"
    with pytest.raises(ConfigError, match=r"unknown configuration key 'learning_rate'"):
        load_config(["learning_rate=0.1"])
    with pytest.raises(ConfigError, match=r"unknown configuration key 'epoch' .*did you mean epochs"):
        load_config(["epoch=3"])
    with pytest.raises(ConfigError, match=r"batch_size \(from the command line\) must be of type int, got 'big'"):
        load_config(["batch_size=big"])
    with pytest.raises(ConfigError, match=r"widths\[1\] .* must be of type int"):
        load_config(["widths=[3, x]"])
    with pytest.raises(ConfigError, match=r"preset 'nope' not found"):
        load_config(["preset=nope"])
    with pytest.raises(ConfigError, match=r"expected key=value, got 'epochs'"):
        load_config(["epochs"])


def test_a_key_given_twice_takes_its_last_value_whichever_key_it_is(tmp_path, capsys):
    # preset=digits ... preset=nope used to train the digits preset and record "preset: nope" in config.yaml.
    with pytest.raises(SystemExit) as stop:
        main(["train", "preset=digits", f"out={tmp_path}", "name=twice", "preset=nope"])
    assert stop.value.code == 2 and "preset 'nope' not found" in capsys.readouterr().err
    assert not (tmp_path / "twice").exists()
    config = load_config(["preset=fashion-mnist", "lr=1", "preset=digits", "lr=2"])
    assert (config.preset, config.dataset, config.lr) == ("digits", "digits", 2.0)  # recorded = read
    hcl = ["preset=digits", "objective=dcl", "objective=hcl"]
    assert load_config([*hcl, "objective.beta=0.5", "objective_params={beta: 1}"]).objective_params["beta"] == 1
    assert load_config([*hcl, "objective_params={beta: 1}", "objective.beta=0.5"]).objective_params["beta"] == 0.5


def test_compile_sets_the_objectives_compile_unless_the_objective_does():
    from uncurated.train.build import build_objective

    train_set = list(range(10))
    for given, expected in ((), None), (("compile=true",), True), (("compile=false",), False):
        config = load_config(["preset=digits", "objective=clip", *given])
        assert build_objective(config, train_set).tiling.compile is expected, given
    config = load_config(["preset=digits", "objective=clip", "compile=true", "objective.compile=false"])
    assert build_objective(config, train_set).tiling.compile is False
    with pytest.raises(ConfigError, match="compile must be one of auto, true, false"):
        load_config(["compile=sometimes"])


def test_an_earlier_point_set_run_keeps_the_wpse_values_it_trained_with(tmp_path):
    """Keys added after a run was saved mean what that version did: WPSE's cells had no positions and its
    kernel mix was (1, 1), which are not today's defaults; a resumed run must not change them silently."""
    import yaml

    from uncurated.train.config import EARLIER_VALUES, resume_conflicts
    from uncurated.train.restore import read_run_config

    today = load_config(["point_sets=true"])
    saved = {key: value for key, value in today.to_dict().items() if key not in EARLIER_VALUES}
    (tmp_path / "config.yaml").write_text(yaml.safe_dump(saved))
    earlier = read_run_config(tmp_path)
    assert earlier.wpse_image_positions is False and earlier.wpse_kernel_weights == [1.0, 1.0]
    assert resume_conflicts(saved, today) == [
        "wpse_image_positions: False -> True",
        "wpse_kernel_weights: [1.0, 1.0] -> [0.667, 0.333]",
    ]
    clip = load_config([])
    assert resume_conflicts({k: v for k, v in clip.to_dict().items() if k not in EARLIER_VALUES}, clip) == []
