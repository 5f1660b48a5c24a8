"""`uncurated eval` on saved features and on a trained run: every measurement, its JSON and its plots."""

import json

import pytest
import torch

from uncurated.cli import main
from uncurated.train import load_config, train


def _blobs(count, classes=4, dim=6, seed=0):
    generator = torch.Generator().manual_seed(seed)
    labels = torch.arange(count) % classes
    centers = 3 * torch.eye(classes, dim)
    return centers[labels] + 0.3 * torch.randn(count, dim, generator=generator), labels


def test_eval_of_a_feature_file_with_joint_space_embeddings(tmp_path, capsys):
    train_features, train_labels = _blobs(200)
    test_features, test_labels = _blobs(80, seed=1)
    prompts = torch.eye(4, 6)[:, None, :].expand(4, 3, 6) + 0.05 * torch.randn(4, 3, 6)
    captions = torch.cat([test_features, test_features + 0.1])  # two captions per image
    torch.save(
        {
            "train_features": train_features,
            "train_labels": train_labels,
            "test_features": test_features,
            "test_labels": test_labels,
            "images": test_features,
            "labels": test_labels,
            "captions": captions,
            "caption_image": torch.arange(80).repeat(2),
            "class_prompts": prompts,
        },
        tmp_path / "features.pt",
    )
    assert main(["eval", str(tmp_path / "features.pt"), "--knn-k", "5"]) == 0
    assert "zero shot" in capsys.readouterr().out
    results = json.loads((tmp_path / "eval.json").read_text())
    # Separable blobs: every classifier is perfect; captions are their images (+ a shift), so retrieval is too.
    for name in ("linear_probe", "knn", "mean_classifier", "zero_shot"):
        assert results[name]["accuracy"] == 1.0, name
    assert results["knn"]["k"] == 5
    assert results["retrieval"]["image_to_text_r1"] == 1.0
    assert results["margins"]["zero_shot"]["fraction_positive"] == 1.0
    assert results["kv_margins"]["kv_margin_median"] > 0
    for plot in ("tsne.png", "per_class_accuracy.png", "margins.png"):
        assert (tmp_path / plot).read_bytes()[:4] == b"\x89PNG", plot


def test_eval_of_a_trained_run_writes_every_plot(tmp_path, capsys):
    train(
        load_config(
            [
                "preset=digits",
                f"out={tmp_path}",
                "name=run",
                "epochs=1",
                "progress=false",
                "probe_train_size=400",
            ]
        )
    )
    assert main(["eval", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    assert "raw pixels" in out
    said = out.splitlines()[-1]  # what it says it wrote is what it wrote
    written = {path.name for path in (tmp_path / "run" / "eval").glob("*.png")}
    assert said.startswith(f"wrote {tmp_path / 'run' / 'eval' / 'eval.json'} and {len(written)} plots in ")
    assert set(said.split(": ")[1].split(", ")) == written
    results = json.loads((tmp_path / "run" / "eval" / "eval.json").read_text())
    for name in ("linear_probe", "knn", "mean_classifier"):
        assert 0.5 < results[name]["accuracy"] <= 1.0, name  # digits: chance is 0.1
    assert set(results["kv_margins"]) == {"samples", "kv_margin_median", "kv_gn_margin_median"}
    for plot in ("tsne.png", "per_class_accuracy.png", "similarities.png"):
        assert (tmp_path / "run" / "eval" / plot).read_bytes()[:4] == b"\x89PNG", plot


def test_eval_names_what_a_feature_file_lacks(tmp_path, capsys):
    features, labels = _blobs(20)
    torch.save({"train_features": features, "train_labels": labels}, tmp_path / "partial.pt")
    with pytest.raises(SystemExit):
        main(["eval", str(tmp_path / "partial.pt")])
    assert "it lacks test_features, test_labels" in capsys.readouterr().err
    torch.save(
        {
            "train_features": features,
            "train_labels": labels,
            "test_features": features,
            "test_labels": labels,
            "images": features,
        },
        tmp_path / "half.pt",
    )
    with pytest.raises(SystemExit):
        main(["eval", str(tmp_path / "half.pt")])
    assert "it lacks labels, captions, caption_image, class_prompts" in capsys.readouterr().err
