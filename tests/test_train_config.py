"""The training configuration: keys checked one by one, the last value of a repeated key."""

import pytest

from uncurated.cli import main
from uncurated.train import ConfigError, TrainConfig, load_config


def test_overrides_are_checked_key_by_key():
    config = load_config(["preset=digits", "lr=3e-4", "widths=[64, 32]", "objective=hcl", "objective.beta=0.5"])
    assert config.lr == 3e-4 and config.widths == [64, 32]
    # The preset's NT-Xent temperature stays with NT-Xent: HCL starts from its own defaults and the given beta.
    assert config.objective_spec() == ("hcl", {"beta": 0.5})
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
    from uncurated.train.builders import build_objective

    train_set = list(range(10))
    for given, expected in ((), None), (("compile=true",), True), (("compile=false",), False):
        config = load_config(["preset=digits", "objective=clip", *given])
        assert build_objective(config, train_set).tiling.compile is expected, given
    config = load_config(["preset=digits", "objective=clip", "compile=true", "objective.compile=false"])
    assert build_objective(config, train_set).tiling.compile is False
    with pytest.raises(ConfigError, match="compile must be one of 'auto', 'true', 'false'"):
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


def _string_keys() -> set[str]:
    from uncurated.train.config import _HINTS, FIELDS

    return {name for name in FIELDS if _HINTS[name] is str}


#: String keys that name no choice of the library: free text, a path, a device, or a file as an alternative.
FREE_KEYS = {
    "preset",
    "name",
    "out",
    "device",
    "data_dir",
    "csv_img_key",
    "csv_caption_key",
    "csv_separator",
    "objective",  # the objectives' registry checks it (uncurated.objectives.build)
    "zero_shot_dir",
    "zero_shot_classes",
    "zero_shot_templates",
    "retrieval_file",
    "retrieval_images",
    "report_to",  # a comma-separated list of trackers (uncurated.train.trackers checks it)
}


def test_every_choice_key_is_declared_with_its_values_and_checked_at_load():
    from uncurated.train.config import RULES

    CHOICES = {key: rule.accepted_choices() for key, rule in RULES.items() if rule.choices is not None}
    ENCODER_CHOICES = {key: rule.builtin_encoders() for key, rule in RULES.items() if rule.encoders is not None}
    declared = set(CHOICES) | set(ENCODER_CHOICES)
    assert declared | FREE_KEYS == _string_keys(), "a string key must be a declared choice or known free text"
    assert not declared & FREE_KEYS
    for key, choices in CHOICES.items():
        for value in choices:  # every declared value loads
            assert getattr(load_config([f"{key}={value}"]), key) == value
        with pytest.raises(ConfigError) as refused:
            load_config([f"{key}=no-such-{key}"])
        message = str(refused.value)
        assert message.startswith(f"{key} must be one of ") and all(repr(value) in message for value in choices)
    for key, builtins in ENCODER_CHOICES.items():
        for value in (*builtins, "hf:bert", "python:package.module:factory"):
            assert getattr(load_config([f"{key}={value}"]), key) == value
        for wrong in (f"no-such-{key}", "hf"):
            with pytest.raises(ConfigError, match=rf"{key} must be one of .*'hf:SOURCE', 'python:module:function'"):
                load_config([f"{key}={wrong}"])
        with pytest.raises(ConfigError, match=rf"{key}=hf: names no hf encoder"):
            TrainConfig(**{key: "hf:"})  # on the command line, YAML reads "hf:" as a mapping


def test_a_close_misspelling_of_a_choice_is_suggested():
    with pytest.raises(
        ConfigError, match=r"dataset must be one of .*; got 'fashion-cluter' \(did you mean 'fashion-clutter'\?\)"
    ):
        load_config(["dataset=fashion-cluter"])


def test_the_augmentation_presets_are_the_declared_names_in_order():
    from uncurated.data.augment import PRESETS
    from uncurated.data_defaults import AUGMENTATIONS

    assert tuple(PRESETS) == AUGMENTATIONS


def test_each_section_checks_its_own_keys_as_declared_on_their_fields():
    from uncurated.train.sections import DataSection, DistributedSection, ModelSection, OptimizationSection

    with pytest.raises(ConfigError, match=r"noise_eta must be in \[0.0, 1.0\], got 1.5"):
        DataSection(noise_eta=1.5)
    with pytest.raises(ConfigError, match=r"parallel must be one of 'ddp', 'fsdp'; got 'zero'"):
        DistributedSection(parallel="zero")
    with pytest.raises(ConfigError, match=r"wpse_kernel_weights must be \[alpha1, alpha2\], not both 0"):
        ModelSection(wpse_kernel_weights=[0.0, 0.0])
    with pytest.raises(ConfigError, match=r"epochs must be in \(0.0, inf\], got 0.0"):
        OptimizationSection(epochs=0)
    assert OptimizationSection(batch_size=64).batch_size == 64 and DataSection().dataset == "fashion-mnist"


def test_what_a_resume_may_change_is_read_from_each_key_declaration():
    from uncurated.train.config import RESUMABLE_CHANGES, RULES, SECTIONS

    assert RESUMABLE_CHANGES == {key for key, rule in RULES.items() if rule.resumable}
    assert {"compile", "micro_batch_size", "dist_timeout", "report_to", "data_dir", "fsdp_mixed_precision"} <= (
        RESUMABLE_CHANGES
    )
    assert not {"lr", "batch_size", "dataset", "parallel", "seed", "objective_params"} & RESUMABLE_CHANGES
    assert SECTIONS["distributed"] == ("dist_timeout", "parallel", "fsdp_mixed_precision", "sync_batch_norm")


def test_an_old_flat_configuration_file_resumes_with_its_values(tmp_path):
    folder = tmp_path / "old"
    folder.mkdir()
    flat = "preset: digits\nname: old\ndataset: digits\nbatch_size: 64\nlr: 0.003\ndist_timeout: 90\nparallel: ddp\n"
    (folder / "config.yaml").write_text(flat + "objective: dcl\nobjective_params: {temperature: 0.3}\n")
    config = load_config([f"out={tmp_path}", "name=old", "resume=true", "dist_timeout=120"])
    assert (config.batch_size, config.lr, config.dataset, config.dist_timeout) == (64, 0.003, "digits", 120.0)
    assert config.objective_params["temperature"] == 0.3
