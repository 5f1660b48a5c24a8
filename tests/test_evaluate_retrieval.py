"""Image-text Recall@K in both directions with several captions per image."""

import math

import pytest
import torch

from uncurated.evaluate import retrieval_recall

# Cosine similarity of each caption (row) with images 0..3 (columns), and the image each caption belongs to.
SIMILARITIES = torch.tensor(
    [
        [0.9, 0.0, 0.0, 0.0],
        [0.1, 0.0, 0.0, 0.0],
        [0.0, 0.2, 0.0, 0.0],
        [0.0, 0.3, 0.2, 0.0],
        [0.0, 0.0, 0.1, 0.0],
        [0.0, 0.5, 0.05, 0.0],
        [0.0, 0.0, 0.6, 0.4],
        [0.0, 0.0, 0.0, 0.45],
    ],
    dtype=torch.float64,
)
CAPTION_IMAGE = torch.tensor([0, 0, 1, 1, 2, 2, 3, 3])


def hand_made_embeddings():
    """Unit images on the first four axes; unit captions whose first four coordinates are SIMILARITIES."""
    images = torch.eye(5, dtype=torch.float64)[:4]
    padding = (1 - SIMILARITIES.pow(2).sum(dim=1, keepdim=True)).sqrt()
    return images, torch.cat([SIMILARITIES, padding], dim=1)


def test_recall_on_hand_made_embeddings():
    images, captions = hand_made_embeddings()
    assert (captions @ images.T).numpy() == pytest.approx(SIMILARITIES.numpy(), abs=1e-15)
    recall = retrieval_recall(images, captions, CAPTION_IMAGE, ks=(1, 2, 3))
    # image -> text: the best own caption of images 0..3 is beaten by 0, 1 (c5), 2 (c3, c6), 0 wrong captions.
    # text -> image: captions 5 and 6 have another image above their own (image 1, image 2); the rest rank first.
    assert recall == pytest.approx(
        {
            "image_to_text_r1": 0.5,
            "image_to_text_r2": 0.75,
            "image_to_text_r3": 1.0,
            "text_to_image_r1": 0.75,
            "text_to_image_r2": 1.0,
            "text_to_image_r3": 1.0,
        }
    )


def test_recall_ignores_norms_caption_order_and_chunking():
    images, captions = hand_made_embeddings()
    expected = retrieval_recall(images, captions, CAPTION_IMAGE, ks=(1, 2))
    order = torch.randperm(len(captions))
    scale = torch.rand(len(captions), 1) + 0.5
    shuffled = retrieval_recall(3 * images, scale * captions[order], CAPTION_IMAGE[order], ks=(1, 2), chunk_size=3)
    assert shuffled == pytest.approx(expected)


def naive_recall(images, captions, caption_image, k, normalize=True):
    """Sort every query's candidates and look for a correct one among the first k."""
    if normalize:
        images, captions = torch.nn.functional.normalize(images, dim=1), torch.nn.functional.normalize(captions, dim=1)
    similarity = images @ captions.T
    image_hits = [
        any(caption_image[m] == i for m in similarity[i].argsort(descending=True)[:k].tolist())
        for i in range(len(images))
    ]
    text_hits = [
        caption_image[m] in similarity[:, m].argsort(descending=True)[:k].tolist() for m in range(len(captions))
    ]
    return sum(image_hits) / len(image_hits), sum(text_hits) / len(text_hits)


def test_recall_matches_sorting_on_random_embeddings():
    generator = torch.Generator().manual_seed(0)
    images = torch.randn(30, 8, generator=generator, dtype=torch.float64)
    counts = torch.randint(1, 4, (30,), generator=generator)
    caption_image = torch.repeat_interleave(torch.arange(30), counts)
    noise = torch.randn(len(caption_image), 8, generator=generator, dtype=torch.float64)
    captions = images[caption_image] + 1.2 * noise
    recall = retrieval_recall(images, captions, caption_image, ks=(1, 5, 10), chunk_size=4)
    for k in (1, 5, 10):
        image_to_text, text_to_image = naive_recall(images, captions, caption_image.tolist(), k)
        assert recall[f"image_to_text_r{k}"] == pytest.approx(image_to_text)
        assert recall[f"text_to_image_r{k}"] == pytest.approx(text_to_image)
    assert 0 < recall["image_to_text_r1"] < 1 and 0 < recall["text_to_image_r1"] < 1  # not a trivial case
    # By the dot product (weighted point sets): the norms count, and the recall is another one.
    scaled = captions * torch.rand(len(captions), 1, generator=generator, dtype=torch.float64).mul(3).add(0.1)
    dot = retrieval_recall(3 * images, scaled, caption_image, ks=(1, 5), chunk_size=4, normalize=False)
    for k in (1, 5):
        image_to_text, text_to_image = naive_recall(3 * images, scaled, caption_image.tolist(), k, normalize=False)
        assert dot[f"image_to_text_r{k}"] == pytest.approx(image_to_text)
        assert dot[f"text_to_image_r{k}"] == pytest.approx(text_to_image)
    assert dot["image_to_text_r1"] != pytest.approx(
        retrieval_recall(images, scaled, caption_image, ks=(1,))["image_to_text_r1"]
    )


def test_ties_count_against_the_query_so_collapsed_embeddings_score_nothing():
    collapsed_images = torch.ones(4, 3)
    collapsed_captions = torch.ones(8, 3)
    recall = retrieval_recall(collapsed_images, collapsed_captions, CAPTION_IMAGE, ks=(1, 4))
    assert recall["image_to_text_r1"] == 0.0 and recall["text_to_image_r1"] == 0.0
    # With K = N only the N - 1 wrong images can rank ahead of the caption's own: always a hit.
    assert recall["text_to_image_r4"] == 1.0
    # Each image has 6 wrong captions tied with its own: a miss even at K = 4.
    assert recall["image_to_text_r4"] == 0.0


def test_retrieval_bad_input_is_rejected():
    images, captions = hand_made_embeddings()
    with pytest.raises(ValueError, match=r"caption_image must hold indices in \[0, 3\], got values in \[0, 4\]"):
        retrieval_recall(images, captions, torch.tensor([0, 0, 1, 1, 2, 2, 3, 4]), ks=(1,))
    with pytest.raises(ValueError, match=r"images \[2\] have no caption"):
        retrieval_recall(images, captions, torch.tensor([0, 0, 1, 1, 3, 3, 3, 3]), ks=(1,))
    with pytest.raises(ValueError, match=r"caption_image must have shape \(8,\)"):
        retrieval_recall(images, captions, CAPTION_IMAGE[:7], ks=(1,))
    with pytest.raises(ValueError, match=r"ks must be in \[1, 4\] \(the number of images\), got \(1, 5\)"):
        retrieval_recall(images, captions, CAPTION_IMAGE, ks=(1, 5))
    with pytest.raises(ValueError, match=r"ks must be a non-empty sequence of integers >= 1"):
        retrieval_recall(images, captions, CAPTION_IMAGE, ks=(0, 1))
    with pytest.raises(ValueError, match=r"caption_features must have 5 columns like image_features"):
        retrieval_recall(images, captions[:, :4], CAPTION_IMAGE, ks=(1,))
    with pytest.raises(ValueError, match=r"caption_image must be an integer tensor"):
        retrieval_recall(images, captions, CAPTION_IMAGE.double(), ks=(1,))
    captions[3, 0] = math.nan
    with pytest.raises(ValueError, match=r"caption_features contains non-finite"):
        retrieval_recall(images, captions, CAPTION_IMAGE, ks=(1,))


def test_repeated_captions_are_merged_into_one_candidate_correct_for_all_their_images():
    generator = torch.Generator().manual_seed(3)
    images = torch.randn(12, 6, generator=generator, dtype=torch.float64)
    caption_image = torch.arange(12).repeat(3)
    caption_ids = torch.randint(0, 9, (36,), generator=generator)  # 36 captions, at most 9 distinct texts
    first = {}
    for m, text in enumerate(caption_ids.tolist()):
        first.setdefault(text, m)
    texts = sorted(first)
    noise = torch.randn(36, 6, generator=generator, dtype=torch.float64)
    captions = images[caption_image] + noise
    relevant = {text: {int(caption_image[m]) for m in range(36) if int(caption_ids[m]) == text} for text in texts}
    distinct = torch.nn.functional.normalize(captions[[first[text] for text in texts]], dim=1)
    similarity = torch.nn.functional.normalize(images, dim=1) @ distinct.T
    recall = retrieval_recall(images, captions, caption_image, ks=(1, 3), caption_ids=caption_ids)
    for k in (1, 3):
        image_hits = [
            any(i in relevant[texts[c]] for c in similarity[i].argsort(descending=True)[:k].tolist()) for i in range(12)
        ]
        text_hits = [
            any(i in relevant[texts[c]] for i in similarity[:, c].argsort(descending=True)[:k].tolist())
            for c in range(len(texts))
        ]
        assert recall[f"image_to_text_r{k}"] == pytest.approx(sum(image_hits) / 12)
        assert recall[f"text_to_image_r{k}"] == pytest.approx(sum(text_hits) / len(texts))


def test_distinct_ids_give_the_per_caption_recall():
    generator = torch.Generator().manual_seed(4)
    images = torch.randn(10, 5, generator=generator, dtype=torch.float64)
    caption_image = torch.arange(10).repeat(2)
    captions = images[caption_image] + torch.randn(20, 5, generator=generator, dtype=torch.float64)
    plain = retrieval_recall(images, captions, caption_image, ks=(1, 5))
    assert retrieval_recall(images, captions, caption_image, ks=(1, 5), caption_ids=torch.arange(20) * 7) == plain
