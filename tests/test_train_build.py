"""From a configuration to a run's parts: objective parameters, user data in every format, WPSE's point sets."""

from pathlib import Path

import pytest
import torch
from training import overrides

from uncurated.train import ConfigError, load_config, train
from uncurated.train.checkpoint import latest_checkpoint


def test_objective_parameters_are_checked_when_the_run_starts(tmp_path):
    with pytest.raises(ConfigError, match=r"objective: dcl does not take parameter\(s\) beta"):
        train(load_config(overrides(tmp_path, "objective=dcl", "objective.beta=1")))


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
    for k in range(2):
        write_tar(root / f"shard-{k}.tar", members[k])
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
        f"out={tmp_path}",
        "progress=false",
        f"dataset={source}",
        f"data_dir={root}",
        f"pipeline={pipeline}",
        "image_mode=L",
        "augment=digits",
        "image_encoder=mlp",
        "probe_layer=encoder",
        "widths=[32]",
        "batch_size=8",
        "epochs=2",
        "text_width=16",
        "text_heads=2",
        "max_skipped_fraction=0.2",
        f"name={source}",
        *extra,
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
        write_idx(
            root / f"{split}-images-idx3-ubyte",
            torch.randint(0, 255, (count, 28, 28), generator=generator, dtype=torch.uint8).numpy(),
        )
        write_idx(root / f"{split}-labels-idx1-ubyte", (torch.arange(count) % 10).to(torch.uint8).numpy())
    dataset = "fashion-mnist" if pipeline == "two_view" else "fashion-captions"
    config = load_config(
        [
            f"out={tmp_path}",
            "progress=false",
            f"pipeline={pipeline}",
            f"dataset={dataset}",
            f"data_dir={root}",
            "point_sets=true",
            "widths=[8, 8]",
            "blocks=[1, 1]",
            "wpse_features=32",
            "projection_dim=8",
            "text_width=16",
            "text_heads=2",
            "batch_size=16",
            "epochs=1",
            "probe_train_size=48",
            "objective=clip" if pipeline == "image_text" else "objective=simclr",
            "objective.learnable=true",
        ]
    )
    report = train(config)
    evaluation = report["evaluation"]
    for classifier in ("linear_probe", "knn", "mean_classifier"):
        assert 0.0 <= evaluation[classifier]["accuracy"] <= 1.0
    if pipeline == "image_text":
        assert 0.0 <= evaluation["zero_shot"]["accuracy"] <= 1.0
        assert 0.0 <= evaluation["retrieval"]["image_to_text_r1"] <= evaluation["retrieval"]["image_to_text_r10"]
