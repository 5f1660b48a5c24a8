"""A small transformer text encoder trained from scratch on the captions' token ids."""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..model_defaults import TEXT_HEADS as DEFAULT_HEADS
from ..model_defaults import TEXT_LAYERS as DEFAULT_LAYERS
from ..model_defaults import TEXT_WIDTH as DEFAULT_WIDTH
from ..validation import check_choice, check_integer, check_range

POOLINGS = ("mean", "cls")


class TextTransformer(nn.Module):
    """Token and learned position embeddings, pre-norm transformer encoder layers, a final LayerNorm.

    It reads the ``(ids, mask)`` pairs of :class:`~uncurated.models.SubwordTokenizer`.
    Attention never looks at padding (the mask is the layers' key padding
    mask) and positions count from the first token, so appending ``[PAD]``
    tokens leaves every real token's output, and the pooled output, unchanged.

    Pooling (``pooling``):

    * ``"mean"`` (default): the mean of the real tokens' outputs. With the
      short captions of small data sets every word then reaches the
      embedding directly, and no single position has to learn to summarize.
    * ``"cls"``: the output at the first position, the tokenizer's ``[CLS]``
      (BERT's choice; CLIP reads its end-of-text token the same way).

    Args:
        vocab_size: rows of the token embedding, ``len(tokenizer)``, >= 1.
        width: the model width and output size, >= 1, divisible by ``heads`` (default 128).
        layers: transformer encoder layers, >= 1 (default 2).
        heads: attention heads per layer, >= 1 (default 4).
        max_length: the longest sequence accepted (the position embeddings), >= 1 (default 32).
        mlp_ratio: the feed-forward size as a multiple of ``width``, > 0 (default 4).
        dropout: dropout inside the layers, in [0, 1) (default 0).
        pooling: ``"mean"`` or ``"cls"``.
        pad_id: the id of ``[PAD]``, whose embedding stays zero, in [0, vocab_size) (default 0).

    Attributes:
        feature_dim: ``width``, the size of :meth:`forward`'s output.
    """

    def __init__(
        self,
        vocab_size: int,
        *,
        width: int = DEFAULT_WIDTH,
        layers: int = DEFAULT_LAYERS,
        heads: int = DEFAULT_HEADS,
        max_length: int = 32,
        mlp_ratio: float = 4.0,
        dropout: float = 0.0,
        pooling: str = "mean",
        pad_id: int = 0,
    ) -> None:
        super().__init__()
        vocab_size = check_integer("vocab_size", vocab_size, 1)
        width = check_integer("width", width, 1)
        heads = check_integer("heads", heads, 1)
        if width % heads:
            raise ValueError(f"width must be divisible by heads ({heads}), got {width}")
        layers = check_integer("layers", layers, 1)
        self.max_length = check_integer("max_length", max_length, 1)
        mlp_ratio = check_range("mlp_ratio", mlp_ratio, 0.0, low_open=True)
        dropout = check_range("dropout", dropout, 0.0, 1.0, high_open=True)
        self.pooling = check_choice("pooling", pooling, POOLINGS)
        pad_id = check_integer("pad_id", pad_id, 0)
        if pad_id >= vocab_size:
            raise ValueError(f"pad_id must be in [0, {vocab_size - 1}] (an id of the vocabulary), got {pad_id}")
        self.feature_dim = width
        self.pad_id = pad_id
        self.token_embedding = nn.Embedding(vocab_size, width, padding_idx=pad_id)
        self.position_embedding = nn.Parameter(torch.empty(self.max_length, width))
        self.layers = nn.ModuleList(
            nn.TransformerEncoderLayer(
                width,
                heads,
                dim_feedforward=max(1, round(mlp_ratio * width)),
                dropout=dropout,
                activation="gelu",
                batch_first=True,
                norm_first=True,
            )
            for _ in range(layers)
        )
        self.norm = nn.LayerNorm(width)
        nn.init.normal_(self.token_embedding.weight, std=0.02)
        nn.init.normal_(self.position_embedding, std=0.01)
        with torch.no_grad():
            self.token_embedding.weight[pad_id].zero_()

    def _checked_mask(self, ids: Tensor, mask: Tensor | None) -> Tensor:
        if not isinstance(ids, Tensor) or ids.ndim != 2 or ids.is_floating_point() or ids.dtype == torch.bool:
            raise ValueError(f"ids must be an integer tensor of shape (batch, length), got {ids!r:.80}")
        if not 1 <= ids.shape[1] <= self.max_length:
            raise ValueError(f"ids must have a length in [1, {self.max_length}] (max_length), got {ids.shape[1]}")
        if mask is None:
            mask = ids.ne(self.pad_id)
        elif not isinstance(mask, Tensor) or mask.dtype != torch.bool or mask.shape != ids.shape:
            raise ValueError(f"mask must be a boolean tensor of the shape of ids {tuple(ids.shape)}, got {mask!r:.80}")
        if not bool(mask.any(dim=1).all()):
            raise ValueError("mask must mark at least one real token in every row")
        return mask

    def _encode(self, ids: Tensor, mask: Tensor) -> Tensor:
        x = self.token_embedding(ids) + self.position_embedding[: ids.shape[1]]
        padding = ~mask
        for layer in self.layers:
            x = layer(x, src_key_padding_mask=padding)
        return self.norm(x) * mask.unsqueeze(-1)

    def tokens(self, ids: Tensor, mask: Tensor | None = None) -> Tensor:
        """Every token's output (B, L, width), for point-set heads; zero at padded positions.

        ``mask`` (B, L) is true at real tokens; without it, every id but
        ``pad_id`` is a real token.
        """
        return self._encode(ids, self._checked_mask(ids, mask))

    def forward(self, ids: Tensor, mask: Tensor | None = None) -> Tensor:
        """The pooled caption embedding (B, width); ``mask`` as in :meth:`tokens`."""
        mask = self._checked_mask(ids, mask)
        if self.pooling == "cls" and not bool(mask[:, 0].all()):
            raise ValueError("pooling='cls' reads the first token, so mask[:, 0] must be true in every row")
        outputs = self._encode(ids, mask)
        if self.pooling == "cls":
            return outputs[:, 0]
        return outputs.sum(dim=1) / mask.sum(dim=1, keepdim=True).to(outputs.dtype)
