"""The papers' presets (configs/cc3m-*.yaml, thesis-two-view.yaml) train 2 steps on tiny generated data."""

from __future__ import annotations

import pytest
import yaml
from hfmodels import overrides, write_caption_shards
from imagefiles import encode, pattern

from uncurated.references import REFERENCES
from uncurated.train import load_config, train
from uncurated.train.checkpoint import latest_checkpoint
from uncurated.train.config import PRESETS_DIR

pytest.importorskip("transformers")

PRESETS = ["cc3m-nuclr", "cc3m-clip", "cc3m-sogclr", "cc3m-wpse", "thesis-two-view"]


@pytest.fixture(scope="module")
def data(tmp_path_factory):
    """Two webdataset shards of 16 RGB 12 x 12 images with captions, and an image folder of 2 classes."""
    root = tmp_path_factory.mktemp("data")
    shards = write_caption_shards(root, size=12)
    for label in range(2):
        (root / "folder" / f"class{label}").mkdir(parents=True)
        for i in range(16):
            (root / "folder" / f"class{label}" / f"{i}.png").write_bytes(encode(pattern(100 + i, size=12, channels=3)))
    return {"shards": shards, "folder": str(root / "folder")}


@pytest.mark.parametrize("preset", PRESETS)
def test_each_paper_preset_trains_two_steps_on_tiny_data(tmp_path, preset, data):
    values = yaml.safe_load((PRESETS_DIR / f"{preset}.yaml").read_text())
    header = (PRESETS_DIR / f"{preset}.yaml").read_text().split("\npipeline:")[0]
    # each cites the paper it reproduces by its short form, and where in it
    assert any(reference.short in header for reference in REFERENCES.values())
    assert "Table" in header or "Sec." in header
    image_kind = values["image_encoder"].removeprefix("hf:")
    arguments = [
        f"preset={preset}",
        f"out={tmp_path}",
        "name=run",
        "progress=false",
        "epochs=1",
        "batch_size=8",
        "image_size=8",
        "num_workers=0",
        "projection_dim=8",
        "checkpoint_every=0",
        *overrides("image_encoder", image_kind),
    ]
    if values["pipeline"] == "image_text":
        text_kind = values["text_encoder"].removeprefix("hf:")
        arguments += [
            f"data_dir={data['shards']}",
            "steps_per_epoch=2",
            "samples_per_shard=16",
            "vocab_size=60",
            "max_caption_length=12",
            "wpse_features=32",
            *overrides("text_encoder", text_kind),
        ]
    else:
        arguments += [f"data_dir={data['folder']}", "batch_size=16", "num_workers=2"]  # decoded in 2 workers
    report = train(load_config(arguments))
    assert report["steps"] == 2
    assert latest_checkpoint(tmp_path / "run" / "checkpoints").name == "step-00000002"
