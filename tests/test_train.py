"""Training: configuration, a short run that learns, kill-and-resume, and two processes against one."""

import os
import socket
import subprocess
import sys
from pathlib import Path

import pytest
import torch
from safetensors.torch import load_file

from uncurated.cli import main
from uncurated.train import ConfigError, load_config, train
from uncurated.train.checkpoint import latest_checkpoint, read_training_state
from uncurated.train.trainer import Trainer

# Small and fast: digits, an MLP without batch norm, no augmentation noise in the comparisons.
SMOKE = ["preset=digits", "progress=false", "log_every=1", "probe_train_size=0"]


def overrides(tmp_path: Path, *extra: str) -> list[str]:
    return [*SMOKE, f"out={tmp_path}", *extra]


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(latest_checkpoint(run_dir / "checkpoints") / "model.safetensors")


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


def test_objective_parameters_are_checked_when_the_run_starts(tmp_path):
    with pytest.raises(ConfigError, match=r"objective: dcl does not take parameter\(s\) beta"):
        train(load_config(overrides(tmp_path, "objective=dcl", "objective.beta=1")))


def test_a_short_run_learns_and_writes_its_report(tmp_path):
    # 16-dimensional features: random ones lose much of digits' information, learned ones keep it.
    narrow = ["widths=[128, 16]", "probe_train_size=1000"]
    report = train(load_config(overrides(tmp_path, *narrow, "epochs=20", "name=learn")))
    run_dir = tmp_path / "learn"
    for name in ("config.yaml", "metrics.csv", "curves.png", "report.json"):
        assert (run_dir / name).is_file(), name
    probe = report["evaluation"]["linear_probe"]
    assert probe["accuracy"] > probe["untrained_accuracy"] + 0.08
    assert probe["accuracy"] > 0.88


@pytest.mark.parametrize("objective", ["dcl", "nuclr"])
def test_a_killed_run_resumed_ends_like_an_uninterrupted_one(tmp_path, monkeypatch, objective):
    common = ["epochs=2", "checkpoint_every=5", f"objective={objective}"]
    if objective == "nuclr":
        common += ["objective.freeze_epochs=0.5", "objective.temperature=0.2"]
    train(load_config(overrides(tmp_path, *common, "name=whole")))

    original = Trainer.step
    calls = {"count": 0}

    def dying_step(self, batch):
        calls["count"] += 1
        if calls["count"] == 13:  # after the checkpoint of step 10, before the one of step 15
            raise KeyboardInterrupt("killed")
        return original(self, batch)

    monkeypatch.setattr(Trainer, "step", dying_step)
    with pytest.raises(KeyboardInterrupt):
        train(load_config(overrides(tmp_path, *common, "name=killed")))
    monkeypatch.setattr(Trainer, "step", original)
    assert latest_checkpoint(tmp_path / "killed" / "checkpoints").name == "step-00000010"
    with pytest.raises(ConfigError, match="pass resume=true"):
        train(load_config(overrides(tmp_path, *common, "name=killed")))
    train(load_config(overrides(tmp_path, *common, "name=killed", "resume=true")))

    whole, resumed = final_weights(tmp_path / "whole"), final_weights(tmp_path / "killed")
    assert whole.keys() == resumed.keys()
    for name in whole:
        torch.testing.assert_close(resumed[name], whole[name], rtol=0, atol=0, msg=name)
    states = [
        read_training_state(latest_checkpoint(tmp_path / run / "checkpoints"))
        for run in ("whole", "killed")
    ]
    assert states[0]["position"] == states[1]["position"]
    assert states[0]["objective"].keys() == states[1]["objective"].keys()
    for key, value in states[0]["objective"].items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, states[1]["objective"][key]), key
        else:
            for name, tensor in value["tensors"].items():
                assert torch.equal(tensor, states[1]["objective"][key]["tensors"][name]), name
            assert value["scalars"] == states[1]["objective"][key]["scalars"]
    rows = (tmp_path / "killed" / "metrics.csv").read_text().splitlines()
    assert len(rows) == 1 + states[0]["position"]["step"]  # no step logged twice


def free_port() -> int:
    with socket.socket() as probe:
        probe.bind(("127.0.0.1", 0))
        return probe.getsockname()[1]


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
    command = [
        sys.executable, "-m", "torch.distributed.run", "--nproc_per_node=2", "--master_addr=127.0.0.1",
        f"--master_port={free_port()}", "-m", "uncurated", "train", *common, "name=two",
    ]
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    finished = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment)
    assert finished.returncode == 0, finished.stderr[-3000:]
    one, two = final_weights(tmp_path / "one"), final_weights(tmp_path / "two")
    for name in one:
        torch.testing.assert_close(two[name], one[name], rtol=1e-5, atol=1e-6, msg=name)
    losses = [
        [float(row.split(",")[2]) for row in (tmp_path / run / "metrics.csv").read_text().splitlines()[1:]]
        for run in ("one", "two")
    ]
    assert losses[0] == pytest.approx(losses[1], rel=1e-5)


def write_image_text_files(root: Path, count: int = 48) -> tuple[Path, Path, Path]:
    """An image folder, a CSV of image paths and captions, and two webdataset shards, each with one bad image."""
    from imagefiles import encode, pattern, write_tar

    folder, images = root / "folder", root / "images"
    words = ["round", "square", "striped", "dotted"]
    rows, members = ["filepath\ttitle"], [[], []]
    for i in range(count):
        label = i % 4
        png = encode(pattern(seed=i + 100 * label, size=8))
        (folder / f"class{label}").mkdir(parents=True, exist_ok=True)
        (folder / f"class{label}" / f"{i:03d}.png").write_bytes(png)
        images.mkdir(exist_ok=True)
        (images / f"{i:03d}.png").write_bytes(png)
        rows.append(f"images/{i:03d}.png\ta {words[label]} pattern number {i}")
        members[i % 2] += [(f"{i:03d}.png", png), (f"{i:03d}.txt", f"a {words[label]} pattern".encode())]
    (folder / "class0" / "broken.png").write_bytes(b"\x89PNG not really")
    rows.append("images/missing.png\ta missing image")
    csv_path = root / "pairs.tsv"
    csv_path.write_text("\n".join(rows) + "\n")
    members[0].append(("broken.png", b""))
    members[0].append(("broken.txt", b"an empty image"))
    shards = [write_tar(root / f"shard-{k}.tar", members[k]) for k in range(2)]
    return folder, csv_path, root / "shard-{0..1}.tar"


@pytest.mark.parametrize("source", ["image-folder", "csv", "webdataset"])
def test_training_reads_user_data_in_every_format_and_reports_bad_items(tmp_path, source, capsys):
    folder, csv_path, shards = write_image_text_files(tmp_path / "data")
    root = {"image-folder": folder, "csv": csv_path, "webdataset": shards}[source]
    pipeline = "two_view" if source == "image-folder" else "image_text"
    # 4 batches of 8 reach shard 0's broken 25th sample (the vocabulary pass before training is not counted).
    extra = ["steps_per_epoch=4", "objective=clip"] if source == "webdataset" else []
    if source == "csv":
        extra = ["objective=nuclr", "objective.freeze_epochs=0"]
    common = [
        f"out={tmp_path}", "progress=false", f"dataset={source}", f"data_dir={root}", f"pipeline={pipeline}",
        "image_mode=L", "augment=digits", "image_encoder=mlp", "probe_layer=encoder", "widths=[32]", "batch_size=8",
        "epochs=2",
        "text_width=16", "text_heads=2", "max_skipped_fraction=0.2", f"name={source}", *extra,
    ]
    report = train(load_config(common))
    assert report["steps"] > 0
    assert latest_checkpoint(tmp_path / source / "checkpoints") is not None
    assert "skipped" in capsys.readouterr().err
    with pytest.raises(Exception, match="skipped"):
        train(load_config([*common, "max_skipped_fraction=0.001", f"name={source}-strict"]))


@pytest.mark.parametrize("pipeline", ["two_view", "image_text"])
def test_wpse_point_sets_train_in_both_pipelines(tmp_path, pipeline):
    from uncurated.data import write_idx

    root = tmp_path / "fashion"
    root.mkdir()
    generator = torch.Generator().manual_seed(0)
    for split, count in (("train", 96), ("t10k", 40)):
        write_idx(root / f"{split}-images-idx3-ubyte", torch.randint(0, 255, (count, 28, 28), generator=generator,
                                                                    dtype=torch.uint8).numpy())
        write_idx(root / f"{split}-labels-idx1-ubyte", (torch.arange(count) % 10).to(torch.uint8).numpy())
    dataset = "fashion-mnist" if pipeline == "two_view" else "fashion-captions"
    config = load_config([
        f"out={tmp_path}", "progress=false", f"pipeline={pipeline}", f"dataset={dataset}", f"data_dir={root}",
        "point_sets=true", "widths=[8, 8]", "blocks=[1, 1]", "wpse_features=32", "projection_dim=8",
        "text_width=16", "text_heads=2", "batch_size=16", "epochs=1", "probe_train_size=48",
        "objective=clip" if pipeline == "image_text" else "objective=simclr", "objective.learnable=true",
    ])
    report = train(config)
    evaluation = report["evaluation"]
    for classifier in ("linear_probe", "knn", "mean_classifier"):
        assert 0.0 <= evaluation[classifier]["accuracy"] <= 1.0
    if pipeline == "image_text":
        assert 0.0 <= evaluation["zero_shot"]["accuracy"] <= 1.0
        assert 0.0 <= evaluation["retrieval"]["image_to_text_r1"] <= evaluation["retrieval"]["image_to_text_r10"]
