"""Evaluation images are decoded as the run's model takes them: a run trained on an in-memory dataset (28 x 28 gray
Fashion-MNIST captions) reads a zero-shot folder of RGB images of any size as gray 28 x 28, as ``load_model`` does."""

from __future__ import annotations

import numpy as np
import torch
from imagefiles import encode

from uncurated.train.config import TrainConfig
from uncurated.train.real_sets import decoding, zero_shot_folder


class GrayModel:
    """Takes (batch, 1, 28, 28) images only, as a run trained on Fashion-MNIST does."""

    def eval(self):
        return self

    def embed_images(self, images):
        assert images.shape[1:] == (1, 28, 28), images.shape
        return images.flatten(1)[:, :4] + 1

    def embed_texts(self, texts):
        return torch.ones(len(texts), 4)


def test_an_in_memory_runs_images_are_decoded_to_its_training_shape():
    captions = TrainConfig(preset="fashion-captions", dataset="fashion-captions", pipeline="image_text")
    assert decoding(captions, (1, 28, 28))["mode"] == "L" and decoding(captions, (1, 28, 28))["size"] == (28, 28)
    assert decoding(captions, (3, 32, 24))["mode"] == "RGB"
    files = TrainConfig(dataset="csv", pipeline="image_text", image_mode="L", image_size=64)
    assert decoding(files, (3, 32, 32))["mode"] == "L" and decoding(files, (3, 32, 32))["size"] == 64


def test_a_zero_shot_folder_of_rgb_images_reaches_a_gray_model(tmp_path):
    for label in ("a", "b"):
        (tmp_path / label).mkdir()
        pixels = np.full((40, 50, 3), 100 if label == "a" else 200, dtype=np.uint8)
        (tmp_path / label / "0.png").write_bytes(encode(pixels))
    config = TrainConfig(preset="fashion-captions", dataset="fashion-captions", pipeline="image_text")
    result = zero_shot_folder(config, GrayModel(), tmp_path, "", "cifar", "cpu", image_shape=(1, 28, 28))
    assert result["images"] == 2 and result["classes"] == 2
