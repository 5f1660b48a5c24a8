"""`uncurated bound` on a trained run and on saved features, and the feature helpers behind it."""

import json

import pytest
import torch

from uncurated.cli import main
from uncurated.data import Augmentation
from uncurated.theory.bound_report import (
    BoundFeatures,
    augmented_embeddings,
    format_bound_table,
    load_features,
    measure_bounds,
    save_features,
)
from uncurated.train import load_config, train


def test_bound_command_on_a_run_then_on_its_saved_features(tmp_path, capsys):
    train(
        load_config(
            [
                "preset=digits",
                f"out={tmp_path}",
                "name=run",
                "epochs=1",
                "progress=false",
                "probe_train_size=0",
            ]
        )
    )
    features = tmp_path / "features.pt"
    arguments = ["--negatives", "4", "16", "--augmentations", "2", "--train-samples", "300", "--epochs", "2"]
    assert main(["bound", str(tmp_path / "run"), *arguments, "--save-features", str(features)]) == 0
    printed = capsys.readouterr().out
    assert "bound (10)" in printed and "upper bound (8)" in printed
    first = json.loads((tmp_path / "run" / "bound" / "bound.json").read_text())
    assert [row["negatives"] for row in first["rows"]] == [4, 16]
    assert first["temperature"] == 0.5  # the digits preset's
    for row in first["rows"]:
        assert row["bound"] == pytest.approx(row["sup"] + row["sub"] + row["collision_curl"] / 2 + row["gap"])
        assert 0.0 <= row["v"] <= 1.0 and 0.0 <= row["tau"] <= 1.0
    assert (tmp_path / "run" / "bound" / "bound.png").read_bytes()[:4] == b"\x89PNG"

    assert main(["bound", str(features), *arguments, "--out", str(tmp_path / "again")]) == 0
    again = json.loads((tmp_path / "again" / "bound.json").read_text())
    assert again == first


def test_bound_command_names_what_is_wrong(tmp_path, capsys):
    with pytest.raises(SystemExit) as exit_info:
        main(["bound", str(tmp_path / "missing")])
    assert exit_info.value.code == 2
    assert "is not a training run" in capsys.readouterr().err
    with pytest.raises(SystemExit):
        main(["bound", str(tmp_path), "--negatives", "0"])
    assert "argument --negatives: must be an integer >= 1, got 0" in capsys.readouterr().err
    bogus = tmp_path / "bogus.pt"
    torch.save({"train_views": torch.zeros(1)}, bogus)
    with pytest.raises(SystemExit):
        main(["bound", str(bogus)])
    assert "lacks train_labels, test_views, test_labels, temperature" in capsys.readouterr().err


def test_augmented_embeddings_are_normalized_and_depend_on_the_seed_only():
    images = torch.rand(10, 1, 8, 8)
    embed = torch.nn.Sequential(torch.nn.Flatten(), torch.nn.Linear(64, 5))
    augment = Augmentation("digits")
    first = augmented_embeddings(embed, images, augment, views=3, seed=4, batch_size=4)
    assert first.shape == (10, 3, 5)
    torch.testing.assert_close(first.norm(dim=-1), torch.ones(10, 3))
    torch.testing.assert_close(augmented_embeddings(embed, images, augment, views=3, seed=4, batch_size=4), first)
    assert not torch.allclose(first[:, 0], first[:, 1])  # each view is its own augmentation
    assert not torch.allclose(augmented_embeddings(embed, images, augment, views=3, seed=5), first)


def test_saved_features_round_trip_and_the_table_has_a_column_per_k(tmp_path):
    generator = torch.Generator().manual_seed(0)
    labels = torch.arange(4).repeat(25)
    views = torch.nn.functional.normalize(torch.randn(100, 2, 6, generator=generator), dim=-1)
    features = BoundFeatures(views, labels, views.flip(0), labels.flip(0), 0.5)
    save_features(features, tmp_path / "f.pt")
    loaded = load_features(tmp_path / "f.pt")
    torch.testing.assert_close(loaded.test_views, features.test_views)
    report = measure_bounds(loaded, [3, 7], epochs=1)
    table = format_bound_table(report)
    assert table.splitlines()[0].split()[-2:] == ["4", "8"]
    with pytest.raises(ValueError, match="negatives must list at least one K"):
        measure_bounds(loaded, [])
