"""Text encoders named by the ``text_encoder`` key: each registers its name, its own keys and its builder once
(:func:`register_text_encoder`); beside them, ``hf:SOURCE`` and ``python:module:function`` name encoders of
``transformers`` and factories (:mod:`uncurated.models.factory`). The package's are a transformer trained from
scratch on a subword tokenizer of the captions, and the frozen pretrained MiniLM. Imports nothing of torch: the
configuration checks ``text_encoder`` against :func:`text_encoder_names`.

A new encoder is one module: the encoder (an ``nn.Module`` from a list of B captions to features (B, D), with an
integer ``feature_dim`` or one measured on two example captions), the :class:`Section` of its own keys (set as
``text_encoder.NAME=VALUE``, checked when it is built), and a call of :func:`register_text_encoder`; the module must
be imported before the configuration is read.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from .registry import Registry
from .setting import NoOptions, Section

#: ``build(config, tokenizer, options)``: the encoder, from the run's configuration (a
#: :class:`~uncurated.train.config.TrainConfig`), the run's subword tokenizer (``None`` unless the kind
#: ``trains_tokenizer``) and the encoder's own keys (its section).
Build = Callable[[Any, Any, Any], Any]


@dataclass(frozen=True)
class TextEncoderKind:
    """An encoder the ``text_encoder`` key names: its ``build``; the section of its own keys (``options``); whether
    it reads captions through a subword tokenizer trained on the run's captions (``trains_tokenizer``: the run
    trains one, saves it in its folder and hands it to ``build``); whether it stays ``frozen`` (pretrained: only a
    linear projection after it trains, as LiT's locked tower, Zhai et al. 2022)."""

    name: str
    build: Build
    options: type[Section] = NoOptions
    trains_tokenizer: bool = False
    frozen: bool = False


#: Every registered text encoder, the package's first.
TEXT_ENCODERS: Registry[TextEncoderKind] = Registry("text encoder")
#: ``register_text_encoder(kind)``: registers it under its name; a name registered twice is refused, naming both
#: builders.
register_text_encoder = TEXT_ENCODERS.register
#: The names ``text_encoder`` accepts besides ``hf:`` and ``python:`` ones.
text_encoder_names = TEXT_ENCODERS.names


def _transformer(config: Any, tokenizer: Any, options: Any) -> Any:
    from ..models.contrastive import CaptionEncoder
    from ..models.text_transformer import TextTransformer

    transformer = TextTransformer(
        len(tokenizer),
        width=config.text_width,
        layers=config.text_layers,
        heads=config.text_heads,
        max_length=config.max_caption_length,
        pad_id=tokenizer.pad_id,
    )
    return CaptionEncoder(tokenizer, transformer, config.max_caption_length)


def _minilm(config: Any, tokenizer: Any, options: Any) -> Any:
    from ..models.minilm import MiniLMTextEncoder

    return MiniLMTextEncoder()


register_text_encoder(TextEncoderKind("transformer", _transformer, trains_tokenizer=True))
register_text_encoder(TextEncoderKind("minilm", _minilm, frozen=True))
