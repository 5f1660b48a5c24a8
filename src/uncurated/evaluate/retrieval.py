"""Image-text retrieval Recall@K in both directions, with several captions per image.

The protocol of the COCO/Flickr30k retrieval benchmarks used by CLIP
(Radford et al. 2021): embeddings are L2-normalized and ranked by cosine
similarity.

- image -> text: an image is a hit at ``K`` when any of its captions is among
  the ``K`` captions most similar to it;
- text -> image: a caption is a hit at ``K`` when its image is among the
  ``K`` images most similar to it.

Recall@K is the fraction of hits over images (resp. captions). Ties are
counted against the query: a correct item ranks behind every wrong item with
an equal similarity, so collapsed embeddings cannot score well. The
similarity matrix is built ``chunk_size`` query rows at a time.

**Repeated captions.** When captions repeat (generated or templated text,
web alt-texts), the same string is a correct answer for one image and a
wrong one for another, and R@1 against them cannot be read. With
``caption_ids`` (the same id for the same text), retrieval runs over the
*distinct* captions instead: each distinct caption is one candidate and one
query, and it is correct for every image that any of its copies describes.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch
import torch.nn.functional as F
from torch import Tensor

from ..validation import check_integer, check_sizes
from .classification import check_class_labels, check_feature_matrix

__all__ = ["retrieval_recall"]


@torch.no_grad()
def retrieval_recall(
    image_features: Tensor,
    caption_features: Tensor,
    caption_image: Tensor,
    *,
    ks: Sequence[int] = (1, 5, 10),
    chunk_size: int = 1024,
    caption_ids: Tensor | None = None,
    normalize: bool = True,
) -> dict[str, float]:
    """Recall@K of both directions, keyed ``image_to_text_r{K}`` and ``text_to_image_r{K}``.

    Args:
        image_features: (N, d) image embeddings.
        caption_features: (M, d) caption embeddings.
        caption_image: (M,) the index of each caption's image; every image needs a caption.
        ks: the cut-offs, each in ``[1, N]``.
        chunk_size: query rows scored at once.
        caption_ids: optional (M,) integer id of each caption's text; captions with the same id are merged
            into one candidate correct for all their images (the module's documentation). The first
            caption of each id gives its embedding.
        normalize: rank by cosine similarity (default); ``False``: by the dot product, the similarity of
            weighted point sets (Uesaka et al. 2025), whose vectors are never normalized.
    """
    check_feature_matrix("image_features", image_features)
    check_feature_matrix("caption_features", caption_features, dim=image_features.shape[1], dim_of="image_features")
    images_count = image_features.shape[0]
    check_class_labels("caption_image", caption_image, caption_features.shape[0], num_classes=images_count)
    uncaptioned = torch.nonzero(torch.bincount(caption_image.cpu(), minlength=images_count) == 0).flatten()
    if len(uncaptioned):
        raise ValueError(
            f"caption_image must name every image at least once; images {uncaptioned[:10].tolist()} have no caption"
        )
    ks = check_sizes("ks", ks, 1)
    if max(ks) > images_count:
        raise ValueError(f"ks must be in [1, {images_count}] (the number of images), got {ks}")
    chunk_size = check_integer("chunk_size", chunk_size, 1)
    if caption_ids is None:
        pairs = torch.stack([torch.arange(len(caption_image)), caption_image.long().cpu()], dim=1)
    else:
        check_class_labels("caption_ids", caption_ids, caption_features.shape[0])
        caption_features, pairs = _merge_repeats(caption_features, caption_image.long(), caption_ids.long().cpu())

    images = image_features.double()
    captions = caption_features.double().to(images.device)
    if normalize:
        images, captions = F.normalize(images, dim=1), F.normalize(captions, dim=1)
    pairs = pairs.to(images.device)  # (caption, image): the caption describes the image
    image_ranks = _ranks(
        images, captions, lambda rows: _relevant(pairs[:, 1], pairs[:, 0], rows, len(captions)), chunk_size
    )
    caption_ranks = _ranks(
        captions, images, lambda rows: _relevant(pairs[:, 0], pairs[:, 1], rows, images_count), chunk_size
    )
    recalls = {}
    for direction, ranks in (("image_to_text", image_ranks), ("text_to_image", caption_ranks)):
        for k in ks:
            recalls[f"{direction}_r{k}"] = float((ranks < k).double().mean())
    return recalls


def _merge_repeats(caption_features: Tensor, caption_image: Tensor, caption_ids: Tensor) -> tuple[Tensor, Tensor]:
    """One embedding per distinct id (its first caption's) and the (P, 2) (distinct caption, image) pairs."""
    distinct, position = torch.unique(caption_ids, return_inverse=True)
    first = torch.full((len(distinct),), len(caption_ids), dtype=torch.long)
    first.scatter_reduce_(0, position, torch.arange(len(caption_ids)), reduce="amin")
    pairs = torch.unique(torch.stack([position, caption_image.cpu()], dim=1), dim=0)
    return caption_features[first.to(caption_features.device)], pairs


def _relevant(query_of_pair: Tensor, candidate_of_pair: Tensor, rows: Tensor, candidates: int) -> Tensor:
    """The (len(rows), candidates) mask of the correct candidates of the consecutive query ``rows``, built
    from the pairs alone, so memory stays one chunk of queries."""
    start = int(rows[0])
    chosen = (query_of_pair >= start) & (query_of_pair <= int(rows[-1]))
    mask = torch.zeros(len(rows), candidates, dtype=torch.bool, device=rows.device)
    mask[query_of_pair[chosen] - start, candidate_of_pair[chosen]] = True
    return mask


def _ranks(queries: Tensor, candidates: Tensor, correct: Callable[[Tensor], Tensor], chunk_size: int) -> Tensor:
    """Per query, how many wrong candidates score at least as high as its best correct candidate.

    ``correct(rows)`` is the (len(rows), n_candidates) mask of the correct candidates of query ``rows``.
    """
    ranks = []
    for rows in torch.arange(len(queries), device=queries.device).split(chunk_size):
        similarity = queries[rows] @ candidates.T
        mask = correct(rows)
        best = similarity.masked_fill(~mask, -torch.inf).amax(dim=1, keepdim=True)
        ranks.append(((similarity >= best) & ~mask).sum(dim=1))
    return torch.cat(ranks)
