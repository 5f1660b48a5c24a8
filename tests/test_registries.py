"""Data formats, image encoders and text encoders register themselves: a new one is one file, a name taken twice is
refused at registration naming both, and a format's datasets are checked against the dataset contract when they are
built."""

import importlib
import sys
import textwrap

import pytest
import torch
from torch.utils.data import IterableDataset
from training import final_weights

from uncurated.models import FrozenTextTower, TextTower
from uncurated.models.subword_tokenizer import train_wordpiece
from uncurated.train import ConfigError, load_config, train
from uncurated.train.builders import build_model, build_splits
from uncurated.train.data_formats import FORMATS, DataFormat, register_format
from uncurated.train.image_encoders import IMAGE_ENCODERS, ImageEncoderKind, register_image_encoder
from uncurated.train.registry import DuplicateRegistration
from uncurated.train.text_encoders import TEXT_ENCODERS, TextEncoderKind, register_text_encoder

FORMAT_FILE = '''
"""Stripes: gray images of horizontal or vertical stripes, a user's data format in one file."""
from dataclasses import dataclass

import torch

from uncurated.train.data_formats import DataFormat, register_format
from uncurated.train.setting import Section, setting


@dataclass
class StripesKeys(Section):
    count: int = setting(64, "how many images", low=8)


class Stripes:
    def __init__(self, count):
        self.labels = torch.arange(count) % 2
        self.images = torch.zeros(count, 1, 8, 8)
        self.images[self.labels == 0, :, ::2, :] = 1.0
        self.images[self.labels == 1, :, :, ::2] = 1.0
        self.captions = [("horizontal", "vertical")[label] + " stripes" for label in self.labels.tolist()]

    def __len__(self):
        return len(self.labels)

    def __getitem__(self, index):
        label = int(self.labels[index])
        return {"index": index, "image": self.images[index], "label": label, "caption": self.captions[index]}


def build(config, options):
    return Stripes(options.count), None


register_format(DataFormat("stripes", build, augment="none", options=StripesKeys))
'''

ENCODER_FILE = '''
"""Tiny: one linear layer over the pixels, a user's image encoder in one file (its feature_dim is measured)."""
from dataclasses import dataclass

from torch import nn

from uncurated.train.image_encoders import ImageEncoderKind, register_image_encoder
from uncurated.train.setting import Section, setting


@dataclass
class TinyKeys(Section):
    hidden: int = setting(16, "the width of the features", low=1)


def build(config, shape, options):
    channels, height, width = shape
    return nn.Sequential(nn.Flatten(), nn.Linear(channels * height * width, options.hidden))


register_image_encoder(ImageEncoderKind("tiny", build, TinyKeys))
'''


TEXT_ENCODER_FILE = '''
"""Bag: the mean of learned token embeddings, a user's text encoder in one file, reading the captions through the
subword tokenizer the run trains on them (its feature_dim is measured)."""
from dataclasses import dataclass

from torch import nn

from uncurated.train.setting import Section, setting
from uncurated.train.text_encoders import TextEncoderKind, register_text_encoder


@dataclass
class BagKeys(Section):
    width: int = setting(8, "the width of the token embeddings", low=1)


class Bag(nn.Module):
    def __init__(self, tokenizer, width):
        super().__init__()
        self.tokenizer = tokenizer
        self.embedding = nn.Embedding(len(tokenizer), width)

    def forward(self, captions):
        ids, mask = self.tokenizer.encode(captions, 8)
        weights = mask.to(self.embedding.weight)[..., None]
        return (self.embedding(ids) * weights).sum(1) / weights.sum(1)


def build(config, tokenizer, options):
    return Bag(tokenizer, options.width)


register_text_encoder(TextEncoderKind("bag", build, BagKeys, trains_tokenizer=True))
'''


@pytest.fixture
def plugins(tmp_path, monkeypatch):
    """The stripes format, the tiny image encoder and the bag text encoder, each imported from its own file, removed
    afterwards."""
    files = {"stripes_format": FORMAT_FILE, "tiny_encoder": ENCODER_FILE, "bag_encoder": TEXT_ENCODER_FILE}
    for module, text in files.items():
        (tmp_path / f"{module}.py").write_text(textwrap.dedent(text))
    monkeypatch.syspath_prepend(str(tmp_path))
    for module in files:
        importlib.import_module(module)
    yield
    FORMATS.unregister("stripes")
    IMAGE_ENCODERS.unregister("tiny")
    TEXT_ENCODERS.unregister("bag")
    for module in files:
        sys.modules.pop(module, None)


#: One step of 16 samples of the temporary ``stripes`` format through the temporary ``tiny`` image encoder.
ONE_STRIPES_STEP = [
    "preset=digits",
    "probe_layer=encoder",
    "progress=false",
    "probe_train_size=0",
    "probe_baselines=false",
    "dataset=stripes",
    "dataset.count=16",
    "image_encoder=tiny",
    "batch_size=16",
    "epochs=1",
]


def test_a_format_and_an_encoder_each_from_one_file_train_a_step_with_their_own_keys(tmp_path, plugins):
    config = load_config(
        [*ONE_STRIPES_STEP, f"out={tmp_path / 'runs'}", "name=stripes", "image_encoder.hidden=12", "objective=infonce"]
    )
    assert (config.augment, config.dataset_options().count) == ("none", 16)
    assert train(config)["steps"] == 1
    shapes = [tuple(value.shape) for value in final_weights(tmp_path / "runs" / "stripes").values()]
    assert (12, 64) in shapes  # the tiny encoder, its own key's width, over 8 x 8 gray images
    with pytest.raises(ConfigError, match=r"dataset.count must be in \[8, inf\], got 2"):
        load_config(["preset=digits", "dataset=stripes", "dataset.count=2"])
    with pytest.raises(ConfigError, match=r"dataset.rows: dataset=stripes takes no such key; it takes dataset.count"):
        load_config(["preset=digits", "dataset=stripes", "dataset.rows=2"])
    with pytest.raises(ConfigError, match=r"dataset.rows: dataset=digits takes no such key; it takes none"):
        load_config(["preset=digits", "dataset.rows=2"])


def test_a_text_encoder_from_one_file_trains_an_image_text_step_on_the_tokenizer_it_declares(tmp_path, plugins):
    config_keys = [*ONE_STRIPES_STEP, f"out={tmp_path / 'runs'}", "pipeline=image_text", "objective=clip"]
    config_keys += ["text_encoder=bag", "text_encoder.width=6", "projection_dim=5"]
    assert train(load_config([*config_keys, "name=bag"]))["steps"] == 1
    run = tmp_path / "runs" / "bag"
    assert (run / "tokenizer.json").is_file()  # it declared trains_tokenizer: the run trained and kept one
    shapes = [tuple(value.shape) for value in final_weights(run).values()]
    assert (5, 6) in shapes  # the projection after the bag's own width
    vocabulary = [shape[0] for shape in shapes if len(shape) == 2 and shape[1] == 6]
    assert vocabulary and vocabulary[0] >= 4  # one embedding per token of the captions' vocabulary
    with pytest.raises(ConfigError, match=r"text_encoder.width must be in \[1, inf\], got 0"):  # when it is built
        train(load_config([*config_keys, "name=bag-narrow", "text_encoder.width=0"]))
    with pytest.raises(ConfigError, match=r"text_encoder.depth: text_encoder=bag takes no such key; it takes "):
        train(load_config([*config_keys, "name=bag-deep", "text_encoder.depth=2"]))


class _CaptionLengths(torch.nn.Module):
    """A pretrained text encoder's stand-in: the captions' lengths through a linear layer (feature_dim 3)."""

    feature_dim = 3

    def __init__(self):
        super().__init__()
        self.linear = torch.nn.Linear(1, 3)

    def forward(self, captions):
        return self.linear(torch.tensor([[float(len(caption))] for caption in captions]))


def test_a_text_encoder_is_handed_the_tokenizer_and_frozen_as_its_kind_declares(plugins):
    handed = {}

    def lengths(config, tokenizer, options):
        handed["lengths"] = tokenizer
        return _CaptionLengths()

    register_text_encoder(TextEncoderKind("lengths", lengths, frozen=True))
    try:
        keys = ["preset=digits", "pipeline=image_text", "image_encoder=mlp", "widths=[4]", "projection_dim=5"]
        frozen = build_model(load_config([*keys, "text_encoder=lengths"]), None, image_shape=(1, 8, 8))
        tokenizer = train_wordpiece(["horizontal stripes", "vertical stripes"], 16)
        bag = build_model(load_config([*keys, "text_encoder=bag"]), None, tokenizer=tokenizer, image_shape=(1, 8, 8))
    finally:
        TEXT_ENCODERS.unregister("lengths")
    assert handed["lengths"] is None  # it declared no trains_tokenizer: it reads the captions its own way
    assert isinstance(frozen.text, FrozenTextTower) and frozen.text.projection.weight.shape == (5, 3)
    assert not any(parameter.requires_grad for parameter in frozen.text.encoder.parameters())
    assert isinstance(bag.text, TextTower) and bag.text.encoder.tokenizer is tokenizer
    assert all(parameter.requires_grad for parameter in bag.text.parameters())


def test_a_name_registered_twice_is_refused_naming_both():
    def other_csv(config, options):
        return None, None

    with pytest.raises(
        DuplicateRegistration,
        match=r"data format 'csv' is registered twice: by "
        r"uncurated.train.builtin_formats._csv and by .*other_csv",
    ):
        register_format(DataFormat("csv", other_csv))
    with pytest.raises(
        DuplicateRegistration,
        match=r"image encoder 'resnet' is registered twice: by "
        r"uncurated.train.image_encoders._resnet and by .*other_csv",
    ):
        register_image_encoder(ImageEncoderKind("resnet", other_csv))
    with pytest.raises(
        DuplicateRegistration,
        match=r"text encoder 'transformer' is registered twice: by "
        r"uncurated.train.text_encoders._transformer and by .*other_csv",
    ):
        register_text_encoder(TextEncoderKind("transformer", other_csv))
    assert TEXT_ENCODERS["transformer"].trains_tokenizer and TEXT_ENCODERS["minilm"].frozen
    assert FORMATS["csv"].build.__name__ == "_csv"


class _Unindexed(IterableDataset):
    def __iter__(self):
        yield {"index": 0, "image": torch.zeros(1, 2, 2)}


@pytest.mark.parametrize(
    ("made", "message"),
    [
        (object(), r"dataset=broken: its builder gave a object, which is neither a map-style dataset"),
        (_Unindexed(), r"dataset=broken: its _Unindexed streams samples but has no integer num_indices"),
    ],
)
def test_a_format_whose_dataset_breaks_the_contract_is_refused_when_built(made, message):
    register_format(DataFormat("broken", lambda config, options: (made, None)))
    try:
        with pytest.raises(ConfigError, match=message):
            build_splits(load_config(["preset=digits", "dataset=broken"]))
    finally:
        FORMATS.unregister("broken")
