"""A trained run stands alone: its config.yaml keeps absolute paths, and `uncurated eval`, `load_run` and
`uncurated.load_model` read only its folder, from another working folder, with the training data gone."""

from __future__ import annotations

import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch
import yaml
from imagefiles import encode, pattern

COLOURS = 3


def write_pairs(folder: Path, name: str, count: int) -> Path:
    """``count`` 10 x 10 RGB images under ``folder/img`` and a CSV of them with one caption each."""
    (folder / "img").mkdir(parents=True, exist_ok=True)
    rows = []
    for number in range(count):
        (folder / "img" / f"{number}.png").write_bytes(encode(pattern(number, size=10, channels=3)))
        rows.append(f"img/{number}.png\tpicture number {number % COLOURS}\n")
    path = folder / name
    path.write_text("filepath\ttitle\n" + "".join(rows))
    return path


@pytest.fixture(scope="module")
def trained(tmp_path_factory) -> Path:
    """A run trained from ``project/`` on ``mydata/train.csv`` (relative), then its data deleted."""
    from uncurated.train import load_config, train

    project = tmp_path_factory.mktemp("project")
    write_pairs(project / "mydata", "train.csv", 12)
    with pytest.MonkeyPatch.context() as patch:
        patch.chdir(project)
        train(
            load_config(
                [
                    "out=runs",
                    "name=mine",
                    "progress=false",
                    "pipeline=image_text",
                    "dataset=csv",
                    "data_dir=mydata/train.csv",
                    "steps_per_epoch=2",
                    "epochs=1",
                    "batch_size=6",
                    "image_encoder=mlp",
                    "widths=[16]",
                    "probe_layer=encoder",
                    "text_width=16",
                    "text_heads=2",
                    "objective=sogclr",
                ]
            )
        )
    run = project / "runs" / "mine"
    shutil.rmtree(project / "mydata")  # what follows must not need it
    return run


def test_config_yaml_keeps_the_paths_absolute_and_the_run_keeps_its_data_shape(trained):
    saved = yaml.safe_load((trained / "config.yaml").read_text())
    assert saved["data_dir"] == str(trained.parents[1] / "mydata" / "train.csv")
    assert json.loads((trained / "training_data.json").read_text()) == {"image_shape": [3, 10, 10], "num_samples": 12}


def test_eval_from_another_folder_needs_only_the_run(trained, tmp_path, monkeypatch, capsys):
    from uncurated.cli import main

    write_pairs(tmp_path, "test.csv", 6)
    monkeypatch.chdir(tmp_path)
    assert main(["eval", str(trained), "--retrieval", "test.csv"]) == 0
    results = json.loads((trained / "eval" / "eval.json").read_text())
    assert results["caption_retrieval"]["images"] == 6


def test_load_run_rebuilds_model_and_objective_without_the_data(trained, tmp_path, monkeypatch):
    from uncurated.train.restore import load_run

    monkeypatch.chdir(tmp_path)
    restored = load_run(trained)
    assert restored.image_shape == (3, 10, 10)
    assert restored.objective.state.sizes == {"a": 12, "b": 12}
    assert not restored.has_test_split
    with pytest.raises(FileNotFoundError):  # the datasets are built only when asked for, and the data is gone
        restored.splits  # noqa: B018


def test_load_model_embeds_files_tensors_and_captions(trained, tmp_path):
    import uncurated
    from uncurated.train.restore import load_run

    write_pairs(tmp_path, "test.csv", 2)
    encoders = uncurated.load_model(trained)
    files = [tmp_path / "img" / "0.png", tmp_path / "img" / "1.png"]
    pixels = torch.stack([encoders.image_transform(path) for path in files])
    assert pixels.shape == (2, 3, 10, 10) and 0.0 <= float(pixels.min()) and float(pixels.max()) <= 1.0
    model = load_run(trained).model
    with torch.no_grad():
        want_images = model.embed_images(pixels)
        want_texts = model.embed_texts(["picture number 1", "picture number 2"])
    torch.testing.assert_close(encoders.embed_images(files), want_images)
    torch.testing.assert_close(encoders.embed_images(pixels, normalize=True).norm(dim=-1), torch.ones(2))
    torch.testing.assert_close(encoders.embed_texts(["  picture number 1", "picture number 2"]), want_texts)
    with pytest.raises(ValueError, match="empty_caption"):
        encoders.embed_texts([" "])


def test_importing_the_package_stays_light_and_load_model_is_at_its_top():
    code = "import sys, uncurated; print('torch' in sys.modules); print(callable(uncurated.load_model))"
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, timeout=120, check=True)
    assert done.stdout.split() == ["False", "True"]


def test_with_absolute_paths_changes_paths_only(tmp_path, monkeypatch):
    from uncurated.train import TrainConfig
    from uncurated.train.run_paths import with_absolute_paths

    monkeypatch.chdir(tmp_path)
    (tmp_path / "my.yaml").write_text("epochs: 1\n")
    (tmp_path / "hf-model").mkdir()
    config = TrainConfig(
        preset="my.yaml",
        dataset="webdataset",
        data_dir="shards/{000..002}.tar",
        zero_shot_dir="val",
        zero_shot_templates="cifar",
        image_encoder="hf:hf-model",
        text_encoder="hf:bert-base-uncased",
    )
    absolute = with_absolute_paths(config)
    assert absolute.preset == str(tmp_path / "my.yaml")
    assert absolute.data_dir == str(tmp_path / "shards" / "{000..002}.tar")
    assert absolute.zero_shot_dir == str(tmp_path / "val")
    assert absolute.image_encoder == f"hf:{tmp_path / 'hf-model'}"
    assert (absolute.zero_shot_templates, absolute.text_encoder) == ("cifar", "hf:bert-base-uncased")
    assert with_absolute_paths(TrainConfig(dataset="webdataset", data_dir="pipe:curl x")).data_dir == "pipe:curl x"
