"""Subword tokenizers from Hugging Face ``tokenizers``: a model folder's own, or one trained on the captions.

:class:`SubwordTokenizer` wraps a ``tokenizers.Tokenizer`` (the fast
tokenizer's ``tokenizer.json``: plain JSON, nothing in it runs code) with the
interface of :class:`~uncurated.models.CaptionTokenizer`: ``encode(captions,
max_length)`` returns padded ids and the mask of real tokens. The folder's
own truncation and padding settings are replaced by the caller's
``max_length`` and padding to the batch's longest sequence.

:func:`train_wordpiece` trains BERT's scheme (lowercased, split on spaces
and punctuation, WordPiece with ``##`` continuations, ``[CLS] ... [SEP]``)
on a run's training captions, for the text towers built from a
configuration class, whose pretrained vocabularies are not at hand offline.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from torch import Tensor

from ..extras import require
from ..validation import check_integer

_FORMAT = "uncurated.SubwordTokenizer"
_VERSION = 1

#: The special tokens of a trained tokenizer, in id order: [PAD] is 0.
SPECIAL_TOKENS = ("[PAD]", "[UNK]", "[CLS]", "[SEP]")

#: Tokens taken as padding when a tokenizer file sets none, in order of preference.
_PAD_CANDIDATES = ("[PAD]", "<pad>", "<|endoftext|>")


class SubwordTokenizer:
    """Captions to padded id tensors through a ``tokenizers.Tokenizer``.

    Args:
        tokenizer: the ``tokenizers.Tokenizer`` (its post-processor adds the
            special tokens, as ``[CLS] ... [SEP]`` for BERT).

    Attributes:
        pad_id: the id that fills sequences up to the batch's longest (the
            file's padding token, else the first of ``[PAD]``, ``<pad>``,
            ``<|endoftext|>`` it knows, else 0); masked out.
    """

    def __init__(self, tokenizer) -> None:
        padding = tokenizer.padding
        self.pad_id = padding["pad_id"] if padding else _first_known(tokenizer, _PAD_CANDIDATES, default=0)
        self._tokenizer = tokenizer
        tokenizer.no_truncation()
        tokenizer.enable_padding(pad_id=self.pad_id, pad_token=tokenizer.id_to_token(self.pad_id) or "[PAD]")

    @classmethod
    def from_file(cls, path: str | os.PathLike) -> SubwordTokenizer:
        """The tokenizer saved in ``path`` (a ``tokenizer.json``); ``ValueError`` naming it if it is not one."""
        require("tokenizers", "hf", "SubwordTokenizer")
        from tokenizers import Tokenizer

        try:
            return cls(Tokenizer.from_file(str(path)))
        except Exception as error:  # tokenizers raises its own Exception type on a bad file
            raise ValueError(f"{path} is not a tokenizer.json that tokenizers can read ({error})") from error

    @classmethod
    def from_folder(cls, folder: str | os.PathLike) -> SubwordTokenizer:
        """The fast tokenizer of a ``save_pretrained`` folder (its ``tokenizer.json``)."""
        path = Path(folder) / "tokenizer.json"
        if not path.is_file():
            raise ValueError(
                f"{folder} has no tokenizer.json: a text model folder needs its fast tokenizer "
                "(save it with tokenizer.save_pretrained(folder))"
            )
        return cls.from_file(path)

    def __len__(self) -> int:
        """The vocabulary's size, special tokens included."""
        return self._tokenizer.get_vocab_size(with_added_tokens=True)

    def token_id(self, token: str) -> int | None:
        return self._tokenizer.token_to_id(token)

    def encode(self, captions: Sequence[str], max_length: int) -> tuple[Tensor, Tensor]:
        """(B, L) ids and the (B, L) boolean mask of real tokens; L is the longest sequence, at most ``max_length``.

        Longer captions are cut so that the special tokens still fit.
        """
        if isinstance(captions, str) or not all(isinstance(caption, str) for caption in captions):
            raise ValueError(f"captions must be a list of strings, got {captions!r:.80}")
        self._tokenizer.enable_truncation(check_integer("max_length", max_length, 1))
        encodings = self._tokenizer.encode_batch(list(captions))
        ids = torch.tensor([encoding.ids for encoding in encodings], dtype=torch.long)
        mask = torch.tensor([encoding.attention_mask for encoding in encodings], dtype=torch.bool)
        return ids, mask

    def save(self, path: str | os.PathLike) -> Path:
        """Write the tokenizer as ``tokenizer.json`` at ``path`` (readable by :meth:`from_file` and transformers)."""
        path = Path(path)
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(self._tokenizer.to_str(), encoding="utf-8")
        return path

    def state_dict(self) -> dict:
        """The tokenizer as a JSON-able dictionary, for checkpoints."""
        return {"format": _FORMAT, "version": _VERSION, "tokenizer": self._tokenizer.to_str()}

    @classmethod
    def from_state_dict(cls, state: dict) -> SubwordTokenizer:
        if not isinstance(state, dict) or state.get("format") != _FORMAT or state.get("version") != _VERSION:
            raise ValueError(f"state must be a {_FORMAT} state of version {_VERSION}")
        require("tokenizers", "hf", "SubwordTokenizer")
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_str(state["tokenizer"]))


def train_wordpiece(captions: Iterable[str], vocab_size: int) -> SubwordTokenizer:
    """A BERT-style WordPiece tokenizer of at most ``vocab_size`` tokens (>= 16) trained on ``captions``.

    The vocabulary holds :data:`SPECIAL_TOKENS` (ids 0 to 3), the characters
    of the captions and the most useful merges; with few captions it is
    smaller than ``vocab_size``.
    """
    require("tokenizers", "hf", "train_wordpiece")
    from tokenizers import Tokenizer, decoders, models, normalizers, pre_tokenizers, processors, trainers

    vocab_size = check_integer("vocab_size", vocab_size, 16)
    tokenizer = Tokenizer(models.WordPiece(unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    tokenizer.decoder = decoders.WordPiece()
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False)
    tokenizer.train_from_iterator(captions, trainer)
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )
    return SubwordTokenizer(tokenizer)


def _first_known(tokenizer, tokens: Sequence[str], default: int) -> int:
    for token in tokens:
        found = tokenizer.token_to_id(token)
        if found is not None:
            return found
    return default
