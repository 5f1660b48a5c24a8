"""What the command line asks for is what runs: a dataset, pipeline or objective other than the preset's takes its
own defaults and says so, every objective starts at its paper's values, ``--dry-run`` shows the resolution, resume
starts from the run's own config.yaml, and ``--help`` documents every key."""

import math

import pytest
import torch
import yaml
from training import SMOKE

from uncurated.cli import main
from uncurated.train import ConfigError, load_config
from uncurated.train.builders import build_objective
from uncurated.train.config import FIELDS, resolve_config, resume_conflicts, with_earlier_values

TRAIN_SET = list(range(40))  # the builders read only its length


def _dry_run(capsys, *arguments: str) -> tuple[dict, str]:
    assert main(["train", "--dry-run", *arguments]) == 0
    captured = capsys.readouterr()
    return yaml.safe_load(captured.out), captured.err


def test_a_csv_run_trains_image_text_with_clip_from_its_paper_temperature():
    config, notes = resolve_config(["dataset=csv", "data_dir=x.csv", "objective=clip"])
    assert (config.pipeline, config.augment, config.name) == ("image_text", "crop", "csv-clip-seed0")
    assert config.objective_params == {}  # the default preset's DCL t = 0.5 stayed with DCL
    objective = build_objective(config, TRAIN_SET)
    assert objective.temperature.learnable and math.isclose(float(objective.temperature().detach()), 0.07, rel_tol=1e-6)
    assert any(
        "dataset=csv is not preset fashion-clutter's" in note and "augment=fashion-clutter" in note for note in notes
    )
    assert any("objective.temperature=0.5 left behind" in note for note in notes)
    unnamed = load_config(["dataset=csv", "data_dir=x.csv", "csv_caption_key=caption"])
    assert (unnamed.pipeline, unnamed.objective, unnamed.csv_caption_key) == ("image_text", "clip", "caption")


def test_a_preset_temperature_stays_with_the_presets_objective():
    config, notes = resolve_config(["preset=fashion-captions", "objective=siglip"])
    siglip = build_objective(config, TRAIN_SET)
    assert siglip.temperature.learnable and math.isclose(float(siglip.temperature().detach()), 0.1, rel_tol=1e-6)
    assert float(siglip.bias.detach()) == -10.0
    assert any("objective.temperature=0.2, objective.learnable=False left behind" in note for note in notes)
    # The preset's own objective keeps them, and the run's start names what is not the paper's.
    from uncurated.train.presets import paper_notes

    clip = load_config(["preset=fashion-captions"])
    assert paper_notes(clip) == [
        "note: objective.temperature=0.2, not clip's default 0.07 (its paper's)",
        "note: objective.learnable=False, not clip's default True (its paper's)",
    ]
    assert paper_notes(config) == []
    assert load_config(["preset=fashion-captions", "objective.temperature=0.3"]).objective_params == {
        "temperature": 0.3,
        "learnable": False,
    }


def test_a_pipeline_or_dataset_change_is_said_and_named_after_what_runs():
    config, notes = resolve_config(["preset=fashion-captions", "dataset=digits", "seed=3"])
    assert (config.pipeline, config.augment, config.objective) == ("two_view", "digits", "dcl")
    assert config.name == "digits-dcl-seed3"
    assert config.objective_params == {}
    assert len(notes) == 2
    kept, kept_notes = resolve_config(["preset=digits", "dataset=digits", "pipeline=two_view"])
    assert (kept.name, kept.objective_params, kept_notes) == ("digits-simclr-seed0", {"temperature": 0.5}, [])


def test_dry_run_prints_the_resolved_configuration_and_writes_nothing(tmp_path, capsys):
    printed, notes = _dry_run(capsys, "dataset=csv", "data_dir=x.csv", f"out={tmp_path}")
    assert (
        printed["pipeline"] == "image_text" and printed["objective"] == "clip" and printed["name"] == "csv-clip-seed0"
    )
    assert "note: dataset=csv" in notes
    assert list(tmp_path.iterdir()) == []


def test_nuclr_freezes_zeta_for_a_sixth_of_the_run_on_every_path():
    from uncurated.objectives.nuclr import NUCLR

    config = load_config(["preset=fashion-captions", "objective=nuclr", "epochs=3"])
    assert config.objective_params == {"epochs": 3.0, "freeze_epochs": 0.5}
    nuclr = build_objective(config, TRAIN_SET)
    assert (nuclr.epochs, nuclr.freeze_epochs) == (3.0, 0.5)
    nuclr.set_epoch(0.6)
    assert nuclr.zeta_step_size > 0  # zeta moves within the run
    assert NUCLR(10, epochs=12).freeze_epochs == 2.0 and NUCLR(10).freeze_epochs == 0.0
    assert NUCLR(10, epochs=12, freeze_fraction=0.25).freeze_epochs == 3.0
    direct = build_objective(type(config)(objective="nuclr", epochs=6.0, pipeline="image_text"), TRAIN_SET)
    assert (direct.epochs, direct.freeze_epochs) == (6.0, 1.0)
    too_long = load_config(["preset=fashion-captions", "objective=nuclr", "epochs=2", "objective.freeze_epochs=2"])
    with pytest.raises(ConfigError, match=r"freeze_epochs must be below epochs = 2"):
        build_objective(too_long, TRAIN_SET)


def test_a_nuclr_run_saved_before_the_freeze_followed_its_length_resumes_as_it_trained():
    saved = load_config(["preset=fashion-captions", "objective=nuclr"]).to_dict()
    saved["objective_params"] = {"gamma": 0.9}  # what an earlier version wrote: no epochs, the 5-epoch freeze
    earlier = with_earlier_values(saved)
    assert earlier["objective_params"] == {"freeze_epochs": 5.0, "epochs": None, "gamma": 0.9}
    config = type(load_config([]))(**earlier)
    assert config.objective_params == {"freeze_epochs": 5.0, "epochs": None, "gamma": 0.9}
    assert resume_conflicts(saved, config) == []
    nuclr = build_objective(config, TRAIN_SET)
    assert (nuclr.freeze_epochs, nuclr.epochs) == (5.0, None)


def test_the_values_a_saved_configuration_holds_are_kept_over_the_earlier_ones():
    """The earlier values fill only the keys a saved configuration lacks: a run saved with them keeps its own
    shuffled stream, projection norm, WPSE values and NUCLR run length."""
    saved = load_config(["dataset=webdataset", "norm=none", "projection_norm=none", "point_sets=true"]).to_dict()
    saved.update(shard_shuffle=True, shuffle_buffer=5, resample_shards=True, wpse_image_positions=True)
    saved.update(wpse_kernel_weights=[0.25, 0.75], objective="nuclr", objective_params={"freeze_epochs": 0.5})
    kept = with_earlier_values(saved)
    assert {key: kept[key] for key in saved if key != "objective_params"} == {
        key: value for key, value in saved.items() if key != "objective_params"
    }
    assert kept["objective_params"] == {"freeze_epochs": 0.5, "epochs": None}
    lacking = {key: value for key, value in saved.items() if key not in ("shuffle_buffer", "projection_norm")}
    filled = with_earlier_values(lacking)
    assert (filled["shuffle_buffer"], filled["projection_norm"], filled["shard_shuffle"]) == (0, "batch", True)


def _digits_run(tmp_path, *extra: str) -> int:
    return main(["train", *SMOKE, "epochs=1", "train_subset=256", f"out={tmp_path}", *extra])


def test_resume_is_one_word_from_the_runs_own_config(tmp_path, capsys):
    assert _digits_run(tmp_path, "name=digits", "checkpoint_every=1", "lr=0.004") == 0
    capsys.readouterr()
    config = load_config([f"out={tmp_path}", "name=digits", "resume=true", "log_every=2"])
    assert (config.preset, config.dataset, config.lr, config.train_subset) == ("digits", "digits", 0.004, 256)
    assert config.log_every == 2 and config.resume
    assert main(["train", f"out={tmp_path}", "name=digits", "resume=latest"]) == 0
    assert "resuming digits" in capsys.readouterr().err
    with pytest.raises(ConfigError, match=r"cannot resume .*\n  lr: 0.004 -> 0.01"):
        from uncurated.train import train

        train(load_config([f"out={tmp_path}", "name=digits", "resume=true", "lr=0.01"]))
    with pytest.raises(ConfigError, match=r"preset=fashion-mnist would not be read"):
        load_config([f"out={tmp_path}", "name=digits", "resume=true", "preset=fashion-mnist"])


def test_resume_of_a_run_that_is_not_there_starts_afresh_and_says_so(tmp_path, capsys):
    assert _digits_run(tmp_path, "name=new", "resume=true") == 0
    assert f"note: resume=true: {tmp_path / 'new'} holds no checkpoint; training from the start" in (
        capsys.readouterr().err
    )


def test_help_groups_every_key_with_its_type_default_range_and_meaning(capsys):
    from uncurated.train.config import RULES, SECTIONS

    listed = [key for keys in SECTIONS.values() for key in keys]
    assert sorted(listed) == sorted(FIELDS) and len(listed) == len(set(listed))
    assert list(listed) == list(FIELDS)  # the sections follow the declaration
    assert all(RULES[key].meaning for key in listed)
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    titles = ("run", "data", "model", "objective", "optimization", "distributed", "checkpoints", "evaluation")
    assert tuple(SECTIONS) == titles
    for section in titles:
        assert f"\n{section}:\n" in text
    assert "\ndistributed:\n  dist_timeout (float in (0.0, inf]; default 600.0)" in text
    assert "  epochs (float in (0.0, inf]; default 5.0)\n      passes over the training data" in text
    assert "  pipeline (str: two_view | image_text; default 'two_view')" in text
    assert "  csv_separator (str; default '\\t')" in text


def test_key_options_and_string_values_are_read_as_given(capsys):
    printed, _ = _dry_run(capsys, "--epochs", "2", "--batch-size=64", "csv_separator=,", "name=007", "--seed=4")
    assert (printed["epochs"], printed["batch_size"], printed["seed"]) == (2.0, 64, 4)
    assert printed["csv_separator"] == "," and printed["name"] == "007"
    printed, _ = _dry_run(capsys, "--objective.temperature", "0.3", "compile=true")
    assert printed["objective_params"]["temperature"] == 0.3 and printed["compile"] == "true"
    with pytest.raises(SystemExit) as stop:
        main(["train", "--no-such-key", "1"])
    assert stop.value.code == 2 and "unrecognized arguments: --no-such-key" in capsys.readouterr().err


@pytest.mark.skipif(torch.cuda.is_available(), reason="needs a machine without CUDA")
def test_a_device_that_is_not_there_is_one_line_before_anything_is_written(tmp_path, capsys):
    with pytest.raises(SystemExit) as stop:
        main(["train", *SMOKE, f"out={tmp_path}", "name=gpu", "device=cuda"])
    error = capsys.readouterr().err
    assert stop.value.code == 2 and error.count("\n") == 1
    assert "device=cuda is not available: this machine has no CUDA device; use device=auto or cpu" in error
    assert list(tmp_path.iterdir()) == []
    with pytest.raises(SystemExit):
        main(["train", "--dry-run", "device=cuda:x"])
    assert "device=cuda:x is not a device name" in capsys.readouterr().err


def test_the_learning_gate_is_said_at_the_end():
    from uncurated.train.evaluation import learning_gate

    passed = learning_gate({"accuracy": 0.45, "untrained_accuracy": 0.40, "raw_pixels_accuracy": 0.42})
    assert "passed (+3.00 points over the better one)" in passed
    failed = learning_gate({"accuracy": 0.43, "untrained_accuracy": 0.40, "raw_pixels_accuracy": 0.42})
    assert "FAILED" in failed and "+1.00 points" in failed
    assert load_config([]).preset == "fashion-clutter"
