"""Tiny Hugging Face models for the tests: configuration overrides, and saved folders with their tokenizer."""

from __future__ import annotations

import json
from pathlib import Path

from imagefiles import encode, pattern, write_tar

#: Overrides that make each hf: architecture tiny (a few thousand parameters), as key=value arguments.
TINY_IMAGE = {
    "resnet": {"embedding_size": 8, "hidden_sizes": [8, 16], "depths": [1, 1]},
    "vit": {
        "hidden_size": 16,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 32,
        "patch_size": 4,
    },
    "clip-vision": {
        "hidden_size": 16,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 32,
        "patch_size": 4,
    },
    "siglip-vision": {
        "hidden_size": 16,
        "num_hidden_layers": 1,
        "num_attention_heads": 2,
        "intermediate_size": 32,
        "patch_size": 4,
    },
}
TINY_TEXT = {
    "bert": {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32},
    "distilbert": {"dim": 16, "n_layers": 1, "n_heads": 2, "hidden_dim": 32},
    "clip-text": {"hidden_size": 16, "num_hidden_layers": 1, "num_attention_heads": 2, "intermediate_size": 32},
}

CAPTIONS = [
    f"a {shade} {shape} pattern number {i}"
    for i, (shade, shape) in enumerate(
        (shade, shape) for shade in ("dark", "light", "striped") for shape in ("round", "square", "dotted", "long")
    )
]


def write_caption_shards(root: Path, size: int) -> str:
    """Two webdataset shards of 16 RGB ``size`` x ``size`` images with captions; their brace pattern."""
    for shard in range(2):
        members = []
        for i in range(16):
            number = 16 * shard + i
            members += [
                (f"{number:04d}.png", encode(pattern(number, size=size, channels=3))),
                (f"{number:04d}.txt", CAPTIONS[number % len(CAPTIONS)].encode()),
            ]
        write_tar(root / f"shard-{shard}.tar", members)
    return str(root / "shard-{0..1}.tar")


def overrides(side: str, kind: str) -> list[str]:
    """``image_encoder=hf:KIND image_encoder.FIELD=VALUE ...`` for a tiny model of ``kind``."""
    fields = (TINY_IMAGE if side == "image_encoder" else TINY_TEXT)[kind]
    return [f"{side}=hf:{kind}", *(f"{side}.{key}={json.dumps(value)}" for key, value in fields.items())]


def save_image_folder(folder: Path, size: int = 16) -> Path:
    """A tiny ViT saved with save_pretrained (safetensors), with a preprocessor_config.json."""
    import transformers

    torch_seed()
    config = transformers.ViTConfig(**TINY_IMAGE["vit"], image_size=size)
    transformers.ViTModel(config).save_pretrained(folder)
    (folder / "preprocessor_config.json").write_text(
        json.dumps(
            {"image_mean": [0.5, 0.4, 0.3], "image_std": [0.2, 0.25, 0.3], "size": {"height": size, "width": size}}
        )
    )
    return folder


def save_text_folder(folder: Path) -> Path:
    """A tiny BERT saved with save_pretrained (safetensors), with a WordPiece tokenizer.json."""
    import transformers

    from uncurated.models.subword_tokenizer import train_wordpiece

    torch_seed()
    tokenizer = train_wordpiece(CAPTIONS, vocab_size=200)
    config = transformers.BertConfig(**TINY_TEXT["bert"], vocab_size=len(tokenizer), pad_token_id=tokenizer.pad_id)
    transformers.BertModel(config).save_pretrained(folder)
    tokenizer.save(folder / "tokenizer.json")
    return folder


def torch_seed() -> None:
    import torch

    torch.manual_seed(0)
