"""Evaluation on real sets: shipped label sets, zero-shot on an image folder, retrieval with several captions."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
import torch
from imagefiles import encode

from uncurated.evaluate import label_sets
from uncurated.train import ConfigError, TrainConfig
from uncurated.train.real_sets import caption_retrieval, zero_shot_folder

COLOURS = {"red": (255, 0, 0), "green": (0, 255, 0), "blue": (0, 0, 255)}


class ColourModel(torch.nn.Module):
    """Images embed as their mean colour, texts as the colour word they name: a model whose answers are known."""

    def embed_images(self, images):
        return images.mean(dim=(2, 3))

    def embed_texts(self, texts):
        return torch.tensor([[float(name in text) for name in COLOURS] for text in texts])


def solid(colour, size=(6, 10)) -> bytes:
    return encode(np.tile(np.array(COLOURS[colour], dtype=np.uint8), (*size, 1)))


def config(**keys) -> TrainConfig:
    return TrainConfig(pipeline="image_text", image_size=8, **keys)


def test_the_shipped_label_sets_are_complete():
    imagenet = label_sets.class_names("imagenet1k")
    assert len(imagenet) == 1000 and imagenet[:2] == ["tench", "goldfish"] and imagenet[-1] == "toilet paper"
    assert label_sets.class_names("cifar10")[::9] == ["airplane", "truck"]
    cifar100 = label_sets.class_names("cifar100")
    assert len(cifar100) == len(set(cifar100)) == 100 and cifar100 == sorted(cifar100) and "maple tree" in cifar100
    assert len(label_sets.templates("imagenet1k")) == 80 and len(label_sets.templates("cifar")) == 18
    assert label_sets.prompts(["cat"], ["a photo of a {}.", "art of the {}."]) == [
        ["a photo of a cat.", "art of the cat."]
    ]
    with pytest.raises(ValueError, match=r"class names must be one of imagenet1k, cifar10, cifar100 or a text file"):
        label_sets.class_names("imagenet21k")


def test_a_shipped_label_set_named_by_a_path_object_is_the_shipped_one():
    """Path("cifar10") names the shipped list as the string does (it was looked up by the Path: KeyError)."""
    assert label_sets.class_names(Path("cifar10")) == label_sets.class_names("cifar10")
    assert label_sets.templates(Path("cifar")) == label_sets.templates("cifar")


def test_zero_shot_on_an_image_folder_with_a_class_names_file(tmp_path):
    for number, (folder, colour) in enumerate([("n01", "red"), ("n02", "green"), ("n03", "blue")] * 3):
        (tmp_path / "val" / folder).mkdir(parents=True, exist_ok=True)
        (tmp_path / "val" / folder / f"{number}.png").write_bytes(solid(colour))
    (tmp_path / "val" / "n02" / "broken.png").write_bytes(b"not a png")
    (tmp_path / "names.txt").write_text("# my classes\nred\ngreen\nblue\n")
    (tmp_path / "templates.txt").write_text("a {} picture\n")
    result = zero_shot_folder(
        config(), ColourModel(), tmp_path / "val", str(tmp_path / "names.txt"), str(tmp_path / "templates.txt"), "cpu"
    )
    assert result == {
        "accuracy": 1.0,
        "top5_accuracy": None,
        "images": 9,
        "skipped_images": 1,
        "classes": 3,
        "templates": 1,
    }
    (tmp_path / "names.txt").write_text("green\nred\nblue\n")  # the folders' order matters
    wrong = zero_shot_folder(config(), ColourModel(), tmp_path / "val", str(tmp_path / "names.txt"), "cifar", "cpu")
    assert wrong["accuracy"] == pytest.approx(1 / 3) and wrong["templates"] == 18
    with pytest.raises(ConfigError, match=r"zero_shot_classes: cifar10 names 10 classes; .* has 3 class folders"):
        zero_shot_folder(config(), ColourModel(), tmp_path / "val", "cifar10", "cifar", "cpu")
    with pytest.raises(ConfigError, match=r"zero_shot_dir measures an image-text model"):
        zero_shot_folder(TrainConfig(), ColourModel(), tmp_path / "val", "", "cifar", "cpu")


@pytest.mark.parametrize("layout", ["karpathy", "csv"])
def test_retrieval_with_several_captions_per_image(tmp_path, layout):
    images = {"a.png": "red", "b.png": "green", "c.png": "blue", "d.png": "red"}
    (tmp_path / "img").mkdir()
    for name, colour in images.items():
        (tmp_path / "img" / name).write_bytes(solid(colour, size=(12, 7)))
    (tmp_path / "img" / "bad.png").write_bytes(b"")
    captions = {
        "a.png": ["a red square", "something red"],
        "b.png": ["green", "a green thing", "grass green"],
        "c.png": ["blue sky"],
        "d.png": ["red again", "another red"],
        "bad.png": ["lost"],
    }
    if layout == "karpathy":
        entries = [
            {"filepath": "img", "filename": name, "split": "test", "sentences": [{"raw": c} for c in texts]}
            for name, texts in captions.items()
        ]
        entries.append({"filepath": "img", "filename": "c.png", "split": "train", "sentences": [{"raw": "red"}]})
        path = tmp_path / "dataset_coco.json"
        path.write_text(json.dumps({"images": entries}))
    else:
        path = tmp_path / "test.csv"
        path.write_text(
            "filepath\ttitle\n" + "".join(f"img/{name}\t{c}\n" for name, texts in captions.items() for c in texts)
        )
    result = caption_retrieval(config(), ColourModel(), path, None, "cpu")
    assert (result["images"], result["captions"], result["skipped_images"]) == (4, 8, 1)
    # Ties count against the query: a.png and d.png are both red, so each ranks the other's two red captions
    # before its own, and a red caption ranks the other red image first; green and blue are found.
    assert result["image_to_text_r1"] == 0.5 and result["text_to_image_r1"] == 0.5
    assert "image_to_text_r5" not in result  # 4 images: R@5 and R@10 are not defined


def test_eval_and_training_measure_a_run_without_a_test_split_on_the_real_sets(tmp_path, capsys):
    from imagefiles import write_tar

    from uncurated.cli import main
    from uncurated.train import load_config, train

    members = []
    for number in range(32):
        colour = list(COLOURS)[number % 3]
        members += [(f"{number:03d}.png", solid(colour)), (f"{number:03d}.txt", f"a {colour} image".encode())]
        (tmp_path / "val" / colour).mkdir(parents=True, exist_ok=True)
        (tmp_path / "val" / colour / f"{number}.png").write_bytes(solid(colour))
    write_tar(tmp_path / "shard.tar", members)
    (tmp_path / "pairs.csv").write_text(
        "filepath\ttitle\n"
        + "".join(
            f"val/{colour}/{n}.png\ta {colour} image\nval/{colour}/{n}.png\t{colour}\n"
            for n, colour in ((n, list(COLOURS)[n % 3]) for n in range(12))
        )
    )
    report = train(
        load_config(
            [
                f"out={tmp_path}",
                "name=run",
                "progress=false",
                "pipeline=image_text",
                "dataset=webdataset",
                f"data_dir={tmp_path / 'shard.tar'}",
                "steps_per_epoch=2",
                "epochs=1",
                "batch_size=16",
                "image_size=8",
                "image_encoder=mlp",
                "widths=[16]",
                "probe_layer=encoder",
                "text_width=16",
                "text_heads=2",
                "objective=clip",
                f"zero_shot_dir={tmp_path / 'val'}",
                "zero_shot_templates=cifar",
            ]
        )
    )
    assert report["evaluation"]["zero_shot_folder"]["images"] == 32
    status = main(
        [
            "eval",
            str(tmp_path / "run"),
            "--zero-shot-dir",
            str(tmp_path / "val"),
            "--templates",
            "cifar",
            "--retrieval",
            str(tmp_path / "pairs.csv"),
        ]
    )
    assert status == 0
    results = json.loads((tmp_path / "run" / "eval" / "eval.json").read_text())
    assert results["zero_shot_folder"]["classes"] == 3 and results["zero_shot_folder"]["templates"] == 18
    assert results["caption_retrieval"]["captions"] == 24 and 0 <= results["caption_retrieval"]["text_to_image_r1"] <= 1
    out = capsys.readouterr().out
    assert "zero-shot folder top-1" in out
    assert "(no plots: they need a labelled test split" in out  # it says only what it wrote
    assert not list((tmp_path / "run" / "eval").glob("*.png"))
