"""Tokenizers of the text towers, all Hugging Face ``tokenizers``: a model folder's own, or one trained on captions.

:class:`SubwordTokenizer` wraps a ``tokenizers.Tokenizer`` (the fast
tokenizer's ``tokenizer.json``: plain JSON, nothing in it runs code):
``encode(captions, max_length)`` returns padded ids and the mask of real
tokens. The folder's own truncation and padding settings are replaced by the
caller's ``max_length`` and padding to the batch's longest sequence.

Two trainers share BERT's normalization and splitting (lowercased, split on
spaces and punctuation, ``[CLS] ... [SEP]``, ``[PAD]`` = 0):

- :func:`train_word_level`, for ``text_encoder=transformer``: the words of
  the captions by decreasing count, ``[UNK]`` for any other. Training it is
  deterministic, so a run repeats exactly from its seed.
- :func:`train_wordpiece`, for the towers built from a configuration class
  (BERT's WordPiece, ``##`` continuations), whose pretrained vocabularies are
  not at hand offline. Its trainer breaks ties between merges in an order
  that changes from process to process: two trainings on the same captions
  can number, and even choose, subwords differently, which is why a run
  saves its tokenizer (``tokenizer.json``) and reuses it.

:func:`from_caption_tokenizer` reads the vocabulary of runs trained before
``text_encoder=transformer`` used ``tokenizers`` (saved in their checkpoints as
``uncurated.CaptionTokenizer``): the same ids for the same captions, so
their checkpoints still load.
"""

from __future__ import annotations

import os
from collections.abc import Iterable, Sequence
from pathlib import Path

import torch
from torch import Tensor

from ..validation import check_integer

_FORMAT = "uncurated.SubwordTokenizer"
_VERSION = 1
#: The checkpoint state of the word-level vocabulary of earlier ``text_encoder=transformer`` runs.
CAPTION_TOKENIZER_FORMAT = "uncurated.CaptionTokenizer"
#: Its special tokens, in id order; words follow from id 3.
CAPTION_TOKENIZER_SPECIALS = ("[PAD]", "[UNK]", "[CLS]")

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
        """The tokenizer :meth:`state_dict` saved, or the word-level vocabulary of an earlier run
        (:func:`from_caption_tokenizer`)."""
        if is_caption_tokenizer_state(state):
            if state.get("version") != 1:
                raise ValueError(
                    f"state must be a {CAPTION_TOKENIZER_FORMAT} state of version 1, got {state.get('version')!r}"
                )
            return from_caption_tokenizer(state.get("vocabulary", ()))
        if not isinstance(state, dict) or state.get("format") != _FORMAT or state.get("version") != _VERSION:
            raise ValueError(f"state must be a {_FORMAT} state of version {_VERSION}")
        from tokenizers import Tokenizer

        return cls(Tokenizer.from_str(state["tokenizer"]))


def train_wordpiece(captions: Iterable[str], vocab_size: int) -> SubwordTokenizer:
    """A BERT-style WordPiece tokenizer of at most ``vocab_size`` tokens (>= 16) trained on ``captions``.

    The vocabulary holds :data:`SPECIAL_TOKENS` (ids 0 to 3), the characters
    of the captions and the most useful merges; with few captions it is
    smaller than ``vocab_size``. Not deterministic (the module's documentation).
    """
    from tokenizers import decoders, models, trainers

    vocab_size = check_integer("vocab_size", vocab_size, 16)
    trainer = trainers.WordPieceTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False)
    return _trained(models.WordPiece(unk_token="[UNK]"), trainer, captions, decoders.WordPiece())


def train_word_level(captions: Iterable[str], vocab_size: int) -> SubwordTokenizer:
    """A tokenizer of whole words: the ``vocab_size`` (>= 16) tokens are :data:`SPECIAL_TOKENS` (ids 0 to 3) and
    the most frequent words of ``captions`` (BERT's split: punctuation marks are words too), by decreasing
    count; any other word is ``[UNK]``. The same captions always give the same tokenizer."""
    from tokenizers import models, trainers

    vocab_size = check_integer("vocab_size", vocab_size, 16)
    trainer = trainers.WordLevelTrainer(vocab_size=vocab_size, special_tokens=list(SPECIAL_TOKENS), show_progress=False)
    return _trained(models.WordLevel(unk_token="[UNK]"), trainer, captions)


def _trained(model, trainer, captions: Iterable[str], decoder=None) -> SubwordTokenizer:
    """``model`` trained on ``captions`` with BERT's normalization, splitting and ``[CLS] ... [SEP]``."""
    from tokenizers import Tokenizer, normalizers, pre_tokenizers, processors

    tokenizer = Tokenizer(model)
    tokenizer.normalizer = normalizers.BertNormalizer(lowercase=True)
    tokenizer.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
    if decoder is not None:
        tokenizer.decoder = decoder
    tokenizer.train_from_iterator(captions, trainer)
    cls_id, sep_id = tokenizer.token_to_id("[CLS]"), tokenizer.token_to_id("[SEP]")
    tokenizer.post_processor = processors.TemplateProcessing(
        single="[CLS] $A [SEP]", pair="[CLS] $A [SEP] $B [SEP]", special_tokens=[("[CLS]", cls_id), ("[SEP]", sep_id)]
    )
    return SubwordTokenizer(tokenizer)


def is_caption_tokenizer_state(state) -> bool:
    """Whether ``state`` is the saved word-level vocabulary of a run from before WordPiece."""
    return isinstance(state, dict) and state.get("format") == CAPTION_TOKENIZER_FORMAT


def from_caption_tokenizer(vocabulary: Sequence[str]) -> SubwordTokenizer:
    """The word-level tokenizer of earlier ``text_encoder=transformer`` runs, as a ``tokenizers`` tokenizer.

    ``vocabulary`` lists the tokens in id order: ``[PAD]``, ``[UNK]``, ``[CLS]``,
    then the words. A caption is lowercased and split into runs of letters and
    digits (``"T-shirt/top"`` is ``t``, ``shirt``, ``top``), each a word's id or
    ``[UNK]``'s, after a ``[CLS]``: the ids those runs were trained on.
    (Unicode lowercasing is the Rust library's, which differs from Python's in
    rare cases such as a word-final Greek sigma.)
    """
    from tokenizers import Regex, Tokenizer, models, normalizers, pre_tokenizers, processors

    vocabulary = list(vocabulary)
    specials = len(CAPTION_TOKENIZER_SPECIALS)
    if tuple(vocabulary[:specials]) != CAPTION_TOKENIZER_SPECIALS:
        raise ValueError(
            f"a word-level vocabulary must start with {CAPTION_TOKENIZER_SPECIALS}, got {tuple(vocabulary[:specials])}"
        )
    if len(set(vocabulary)) != len(vocabulary) or not all(isinstance(word, str) for word in vocabulary):
        raise ValueError("a word-level vocabulary must hold distinct strings")
    tokenizer = Tokenizer(models.WordLevel({word: i for i, word in enumerate(vocabulary)}, unk_token="[UNK]"))
    tokenizer.normalizer = normalizers.Lowercase()
    tokenizer.pre_tokenizer = pre_tokenizers.Split(Regex(r"[^\W_]+"), behavior="removed", invert=True)
    tokenizer.post_processor = processors.TemplateProcessing(single="[CLS] $A", special_tokens=[("[CLS]", 2)])
    tokenizer.enable_padding(pad_id=0, pad_token="[PAD]")
    return SubwordTokenizer(tokenizer)


def _first_known(tokenizer, tokens: Sequence[str], default: int) -> int:
    for token in tokens:
        found = tokenizer.token_to_id(token)
        if found is not None:
            return found
    return default
