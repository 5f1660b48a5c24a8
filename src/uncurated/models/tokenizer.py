"""A word-level tokenizer whose vocabulary is built from the training captions.

Captions are lowercased and split on every character that is not a letter or
a digit (``"T-shirt/top"`` is ``["t", "shirt", "top"]``). The vocabulary is
fixed by the captions it is built from, in a deterministic order, and saved
with a checkpoint as a JSON-serializable dictionary, so a trained text encoder
always meets the ids it was trained with.
"""

from __future__ import annotations

import re
from collections import Counter
from collections.abc import Iterable, Sequence

import torch
from torch import Tensor

from ..validation import check_integer

_WORD = re.compile(r"[^\W_]+")
_FORMAT = "uncurated.CaptionTokenizer"
_VERSION = 1


def split_words(caption: str) -> list[str]:
    """The words of a caption: lowercased runs of letters and digits (Unicode included)."""
    return _WORD.findall(caption.lower())


class CaptionTokenizer:
    """Maps captions to padded id tensors with a vocabulary of whole words.

    Ids 0 to 2 are the special tokens:

    * ``[PAD]`` (id 0): fills a sequence up to the batch's length; masked out.
    * ``[UNK]`` (id 1): any word outside the vocabulary.
    * ``[CLS]`` (id 2): opens every sequence, so even an empty caption has
      one real token (and pooling over real tokens is always defined).

    The words follow from id 3, by decreasing count in the captions the
    vocabulary was built from, ties in alphabetical order.

    Args:
        words: the vocabulary's words in id order (ids from 3): distinct,
            each a single word as :func:`split_words` finds it. Use
            :meth:`build` to make them from captions.
    """

    PAD = "[PAD]"
    UNK = "[UNK]"
    CLS = "[CLS]"
    SPECIAL_TOKENS = (PAD, UNK, CLS)
    pad_id = 0
    unk_id = 1
    cls_id = 2

    def __init__(self, words: Iterable[str]) -> None:
        words = tuple(words)
        for word in words:
            if not isinstance(word, str) or split_words(word) != [word]:
                raise ValueError(f"words must be lowercase runs of letters and digits (one word each), got {word!r}")
        if len(set(words)) != len(words):
            repeated = sorted(word for word, count in Counter(words).items() if count > 1)
            raise ValueError(f"words must be distinct, got repeats: {repeated[:5]}")
        self.vocabulary: tuple[str, ...] = self.SPECIAL_TOKENS + words
        self._ids = {token: index for index, token in enumerate(self.vocabulary)}

    @classmethod
    def build(cls, captions: Iterable[str], *, min_count: int = 1, max_size: int | None = None) -> CaptionTokenizer:
        """The tokenizer of the words that occur at least ``min_count`` times in ``captions``.

        Args:
            captions: the training captions (strings).
            min_count: the fewest occurrences a word needs to enter the vocabulary, >= 1.
            max_size: the most words kept (the special tokens not counted), >= 1, or
                ``None`` for no limit; the most frequent are kept, ties in alphabetical order.
        """
        min_count = check_integer("min_count", min_count, 1)
        if max_size is not None:
            max_size = check_integer("max_size", max_size, 1)
        counts: Counter[str] = Counter()
        for caption in _check_captions(captions):
            counts.update(split_words(caption))
        ranked = sorted((item for item in counts.items() if item[1] >= min_count), key=lambda item: (-item[1], item[0]))
        return cls(word for word, _ in ranked[:max_size])

    def __len__(self) -> int:
        """The vocabulary size, special tokens included: the rows an embedding table needs."""
        return len(self.vocabulary)

    def token_id(self, word: str) -> int:
        """The id of a word or special token; ``unk_id`` for any other string."""
        return self._ids.get(word, self.unk_id)

    def encode(self, captions: Sequence[str], max_length: int) -> tuple[Tensor, Tensor]:
        """Ids and mask of a batch of captions.

        Each sequence is ``[CLS]`` and the caption's word ids, truncated to
        ``max_length`` tokens and padded with ``[PAD]`` to the longest
        sequence of the batch.

        Args:
            captions: a list of strings (not a single string).
            max_length: the most tokens per sequence, ``[CLS]`` included, >= 2.

        Returns:
            ``ids``, a LongTensor (B, L), and ``mask``, a BoolTensor (B, L) that
            is true at real tokens, with ``L <= max_length`` the longest sequence.
        """
        max_length = check_integer("max_length", max_length, 2)
        sequences = [
            [self.cls_id] + [self.token_id(word) for word in split_words(caption)][: max_length - 1]
            for caption in _check_captions(captions)
        ]
        length = max((len(sequence) for sequence in sequences), default=1)
        padded = [sequence + [self.pad_id] * (length - len(sequence)) for sequence in sequences]
        ids = torch.tensor(padded, dtype=torch.long).reshape(len(sequences), length)
        return ids, ids != self.pad_id

    def decode(self, ids: Tensor) -> list[str]:
        """The words of each row of ``ids`` (B, L) joined by spaces, special tokens left out.

        ``decode(encode(captions, n)[0])`` gives each caption's words, lowercased,
        with ``[UNK]`` in place of unknown words; ``[PAD]`` and ``[CLS]`` are dropped.
        """
        if not isinstance(ids, Tensor) or ids.ndim != 2 or ids.is_floating_point():
            raise ValueError(f"ids must be an integer tensor of shape (batch, length), got {ids!r:.80}")
        if ids.numel() and not 0 <= int(ids.min()) <= int(ids.max()) < len(self):
            raise ValueError(f"ids must be in [0, {len(self) - 1}] (the vocabulary), got values outside it")
        skipped = {self.pad_id, self.cls_id}
        return [" ".join(self.vocabulary[i] for i in row if i not in skipped) for row in ids.tolist()]

    def state_dict(self) -> dict:
        """A JSON-serializable description of the vocabulary; :meth:`from_state_dict` restores it."""
        return {"format": _FORMAT, "version": _VERSION, "vocabulary": list(self.vocabulary)}

    @classmethod
    def from_state_dict(cls, state: dict) -> CaptionTokenizer:
        """The tokenizer saved by :meth:`state_dict`."""
        if not isinstance(state, dict) or state.get("format") != _FORMAT:
            raise ValueError(f"state must be a dictionary made by CaptionTokenizer.state_dict(), got {state!r:.80}")
        if state.get("version") != _VERSION:
            version = state.get("version")
            raise ValueError(f"state must have version {_VERSION}, the one this class reads, got {version!r}")
        vocabulary = tuple(state.get("vocabulary", ()))
        specials = len(cls.SPECIAL_TOKENS)
        if vocabulary[:specials] != cls.SPECIAL_TOKENS:
            raise ValueError(
                f"state's vocabulary must start with the special tokens {cls.SPECIAL_TOKENS}, "
                f"got {vocabulary[:specials]}"
            )
        return cls(vocabulary[specials:])

    def __eq__(self, other: object) -> bool:
        return isinstance(other, CaptionTokenizer) and self.vocabulary == other.vocabulary

    def __repr__(self) -> str:
        return f"{type(self).__name__}(words={len(self) - len(self.SPECIAL_TOKENS)})"


def _check_captions(captions: Iterable[str]) -> Iterable[str]:
    if isinstance(captions, str):
        raise ValueError("captions must be a list of strings, got a single string")
    for caption in captions:
        if not isinstance(caption, str):
            raise ValueError(f"captions must be strings, got {type(caption).__name__}: {caption!r:.80}")
        yield caption
