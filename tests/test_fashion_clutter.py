import numpy as np
import pytest
import torch
from fakedata import write_fake_fashion_mnist

import uncurated.data.fashion_clutter as clutter
from uncurated.cli import main
from uncurated.data import CLASS_NAMES, ClutterDesign, fashion_clutter_dataset
from uncurated.train.builders import build_splits
from uncurated.train.config import ConfigError, load_config


@pytest.fixture
def source(tmp_path, monkeypatch):
    """A tiny Fashion-MNIST folder, and a cache folder of the test's own."""
    monkeypatch.setenv(clutter.CACHE_ENV, str(tmp_path / "cache"))
    write_fake_fashion_mnist(tmp_path / "fashion", sizes={"train": 40, "test": 20})
    return tmp_path / "fashion"


def _images(dataset) -> np.ndarray:
    return dataset.images.numpy()


def test_shapes_labels_and_classes(source):
    train = fashion_clutter_dataset(source, "train", side=24)
    test = fashion_clutter_dataset(source, "test", side=24)
    assert train.images.shape == (40, 3, 24, 24) and train.images.dtype == torch.uint8
    assert test.images.shape == (20, 3, 24, 24)
    np.testing.assert_array_equal(train.labels.numpy(), np.arange(40) % 10)
    assert train.classes == CLASS_NAMES
    assert not np.array_equal(_images(train)[:20], _images(test))  # the splits draw from streams of their own
    assert fashion_clutter_dataset(source, "train", side=24, count=7).images.shape == (7, 3, 24, 24)


def test_the_same_seed_renders_the_same_images_and_another_seed_others(source, tmp_path):
    first = fashion_clutter_dataset(source, seed=3, cache=tmp_path / "a")
    again = fashion_clutter_dataset(source, seed=3, cache=tmp_path / "b")  # rendered anew, not read back
    other = fashion_clutter_dataset(source, seed=4, cache=tmp_path / "a")
    np.testing.assert_array_equal(_images(first), _images(again))
    assert (_images(first) != _images(other)).mean() > 0.5


def test_the_garment_moves_and_changes_colour(source):
    images = _images(fashion_clutter_dataset(source, design=ClutterDesign(background="plain", background_strength=0)))
    ink = images.max(axis=1) > 0
    rows = [np.flatnonzero(mask.any(axis=1))[0] for mask in ink]
    assert len(set(rows)) > 3  # not all at the same height
    mean_colours = images.reshape(len(images), 3, -1).sum(-1) / ink.reshape(len(images), -1).sum(-1)[:, None]
    assert np.std(mean_colours.argmax(axis=1)) > 0  # the dominant channel varies


def test_the_cache_is_read_back_when_its_key_matches(source, tmp_path, monkeypatch):
    fashion_clutter_dataset(source, seed=1)
    written = list((tmp_path / "cache").glob("*.npz"))
    assert len(written) == 1

    def refuse(*args, **kwargs):
        raise AssertionError("rendered although the cache matched")

    monkeypatch.setattr(clutter, "render_clutter", refuse)
    fashion_clutter_dataset(source, seed=1)


@pytest.mark.parametrize(
    "change",
    [
        {"generator_version": 99},
        {"seed": 2},
        {"side": 24},
        {"count": 10},
        {"design": ClutterDesign(background="noise")},
    ],
)
def test_a_cache_of_another_version_seed_side_count_or_design_is_rebuilt(source, tmp_path, monkeypatch, change):
    """A cache file planted at the current name but written for other settings is never read as current."""
    expected = _images(fashion_clutter_dataset(source, seed=1, cache=tmp_path / "fresh"))
    stale_options = {"seed": 1, **{key: value for key, value in change.items() if key != "generator_version"}}
    if "generator_version" in change:
        monkeypatch.setattr(clutter, "GENERATOR_VERSION", change["generator_version"])
    stale = fashion_clutter_dataset(source, cache=tmp_path / "stale", **stale_options)
    monkeypatch.undo()
    planted = next((tmp_path / "stale").glob("*.npz"))
    # The stale file takes the name the current settings would be cached under.
    current_name = next((tmp_path / "fresh").glob("*.npz")).name
    planted.rename(tmp_path / "stale" / current_name)
    assert _images(stale).shape != expected.shape or not np.array_equal(_images(stale), expected)
    read = fashion_clutter_dataset(source, seed=1, cache=tmp_path / "stale")
    np.testing.assert_array_equal(_images(read), expected)


def test_a_corrupt_cache_is_rebuilt(source, tmp_path):
    expected = _images(fashion_clutter_dataset(source, seed=1))
    (path,) = (tmp_path / "cache").glob("*.npz")
    path.write_bytes(b"not a zip file")
    np.testing.assert_array_equal(_images(fashion_clutter_dataset(source, seed=1)), expected)


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"split": "valid"}, "split must be one of"),
        ({"side": 4}, "side must be an integer >= 8"),
        ({"side": 64}, r"side must be an integer in \[8, 56\]"),
        ({"seed": -1}, "seed must be an integer >= 0"),
        ({"count": 0}, "count must be an integer >= 1"),
    ],
)
def test_bad_arguments_are_named(source, options, message):
    with pytest.raises(ValueError, match=message):
        fashion_clutter_dataset(source, **options)


def test_a_bad_design_is_named():
    with pytest.raises(ValueError, match="background must be one of"):
        ClutterDesign(background="stripes")
    with pytest.raises(ValueError, match="scale"):
        ClutterDesign(scale=(0.9, 0.5))


def test_an_unknown_dataset_name_lists_the_datasets_with_fashion_clutter():
    with pytest.raises(ConfigError) as error:
        build_splits(load_config(["dataset=fashion-cluter"]))
    message = str(error.value)
    assert "dataset must be one of" in message and "'fashion-clutter'" in message and "'fashion-mnist'" in message


def test_the_dataset_key_renders_both_splits(source):
    splits = build_splits(load_config(["preset=fashion-clutter", f"data_dir={source}", "train_subset=30"]))
    assert splits.train.images.shape == (30, 3, 32, 32) and splits.test.images.shape == (20, 3, 32, 32)


def test_a_few_training_steps_on_it_through_the_command_line(source, tmp_path, capsys):
    arguments = [
        "train",
        "preset=fashion-clutter",
        f"data_dir={source}",
        f"out={tmp_path / 'runs'}",
        "name=clutter",
        "objective=simclr",
        "widths=[8, 8]",
        "blocks=[1, 1]",
        "projection_dim=16",
        "batch_size=16",
        "epochs=1",
        "train_subset=0",  # the whole of the 40 test images (the preset trains on 10,000 of 60,000)
        "probe_train_size=40",
        "probe_layer=encoder",
        "progress=false",
    ]
    main(arguments)
    assert (tmp_path / "runs" / "clutter" / "config.yaml").is_file()
    assert "two_view on fashion-clutter (40 samples)" in capsys.readouterr().err
    assert "accuracy" in (tmp_path / "runs" / "clutter" / "report.json").read_text()
