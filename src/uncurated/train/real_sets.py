"""A trained image-text model measured on real evaluation sets: zero-shot on a labelled image folder, and
retrieval on a test set with several captions per image (Karpathy's COCO / Flickr30k layout, or a CSV).

Images are decoded as the run decodes its training images (``image_mode``,
the backbone's size, ``image_resize``) in ``num_workers`` DataLoader
processes; unreadable images are left out and counted (``skipped_images``),
with their captions. Zero-shot follows CLIP: each class's prompts (every
template filled with its name) are embedded, normalized, averaged and
renormalized, and an image takes the class of highest cosine similarity
(:func:`~uncurated.evaluate.zero_shot_accuracy`). Retrieval is Recall@1/5/10
both ways (:func:`~uncurated.evaluate.retrieval.retrieval_recall`): an image
is found by any of its captions, and ties count against the query. A
point-set model is scored by its own similarity, the dot product of its
vectors (a class is the plain mean of its prompts' vectors).
"""

from __future__ import annotations

import functools
import os
from pathlib import Path

import torch
from torch import Tensor
from torch.utils.data import DataLoader, Dataset

from ..data import ImageFolderDataset, Sample, SkipReport, collate_samples
from ..data.caption_sets import read_caption_set
from ..data.decode import decode_image, read_file
from ..data.skip import BadSample
from ..evaluate import label_sets
from ..evaluate.retrieval import retrieval_recall
from ..evaluate.zero_shot import zero_shot_accuracy
from .builders import image_resize, image_size
from .config import ConfigError, TrainConfig
from .data_formats import FORMATS

#: Images embedded per forward pass, and captions per text forward pass.
BATCH_SIZE = 256
#: The retrieval cut-offs (those above the number of images are left out).
RECALL_AT = (1, 5, 10)


def real_set_evaluation(config: TrainConfig, model, device, image_shape: tuple[int, ...] | None = None) -> dict:
    """The evaluations the configuration asks for: ``zero_shot_dir`` and ``retrieval_file`` (none: ``{}``).
    ``image_shape``: the (channels, height, width) of the run's training images, which the images of a run trained
    on an in-memory dataset are decoded to (:func:`decoding`)."""
    results = {}
    if config.zero_shot_dir:
        results["zero_shot_folder"] = zero_shot_folder(
            config,
            model,
            config.zero_shot_dir,
            config.zero_shot_classes,
            config.zero_shot_templates,
            device,
            image_shape=image_shape,
        )
    if config.retrieval_file:
        results["caption_retrieval"] = caption_retrieval(
            config, model, config.retrieval_file, config.retrieval_images or None, device, image_shape=image_shape
        )
    return results


@torch.no_grad()
def zero_shot_folder(
    config: TrainConfig, model, folder, classes: str, templates: str, device, *, image_shape=None
) -> dict:
    """Zero-shot top-1 and top-5 on ``folder`` (one subfolder per class, sorted = label order).

    ``classes``: a shipped class-name list or a file (``""``: the subfolder names);
    ``templates``: a shipped template set or a file.
    """
    _check_image_text(config, "zero_shot_dir")
    try:
        dataset = ImageFolderDataset(folder, **decoding(config, image_shape))
        names = label_sets.class_names(classes) if classes else dataset.classes
        patterns = label_sets.templates(templates)
    except ValueError as error:
        raise ConfigError(f"zero_shot_dir: {error}") from error
    if len(names) != len(dataset.classes):
        raise ConfigError(
            f"zero_shot_classes: {classes} names {len(names)} classes; {folder} has "
            f"{len(dataset.classes)} class folders"
        )
    images, kept = _embed_images(model, dataset, config, device)
    labels = torch.tensor([dataset.samples[i][1] for i in kept.tolist()])
    prompts = [_embed_texts(model, group, device) for group in label_sets.prompts(names, patterns)]
    result = zero_shot_accuracy(images, prompts, labels, normalize=_cosine(model))
    return {
        "accuracy": result.accuracy,
        "top5_accuracy": result.top5_accuracy,
        "images": len(kept),
        "skipped_images": len(dataset) - len(kept),
        "classes": len(names),
        "templates": len(patterns),
    }


@torch.no_grad()
def caption_retrieval(config: TrainConfig, model, path, images, device, *, image_shape=None) -> dict:
    """Recall@1/5/10 image -> text and text -> image over a caption set's images and all their captions."""
    _check_image_text(config, "retrieval_file")
    try:
        caption_set = read_caption_set(path, images=images)
    except (ValueError, KeyError) as error:
        raise ConfigError(f"retrieval_file: {error}") from error
    dataset = _ImageFiles(caption_set.image_paths, **decoding(config, image_shape))
    image_embeddings, kept = _embed_images(model, dataset, config, device)
    position = {image: number for number, image in enumerate(kept.tolist())}
    chosen = [k for k, image in enumerate(caption_set.caption_image) if image in position]
    captions = _embed_texts(model, [caption_set.captions[k] for k in chosen], device)
    owners = torch.tensor([position[caption_set.caption_image[k]] for k in chosen])
    ks = [k for k in RECALL_AT if k <= len(kept)]
    recalls = retrieval_recall(image_embeddings, captions, owners, ks=ks, normalize=_cosine(model))
    return {**recalls, "images": len(kept), "captions": len(chosen), "skipped_images": len(dataset) - len(kept)}


def _cosine(model) -> bool:
    """Whether the model scores pairs by the cosine of its embeddings (else by their dot product)."""
    return getattr(model, "similarity", "cosine") == "cosine"


def _check_image_text(config: TrainConfig, key: str) -> None:
    if config.pipeline != "image_text":
        raise ConfigError(f"{key} measures an image-text model; this run is pipeline={config.pipeline}")


def decoding(config: TrainConfig, image_shape: tuple[int, ...] | None = None) -> dict:
    """How evaluation images are decoded: as the run's files were (``image_mode``, its size, ``image_resize``), or
    for a run trained on an in-memory dataset, whose images no key describes, to ``image_shape`` (channels,
    height, width: gray for one channel)."""
    if image_shape is None or not FORMATS[config.dataset].in_memory:
        return {"mode": config.image_mode, "size": image_size(config), "resize": image_resize(config)}
    channels, height, width = image_shape
    return {"mode": "L" if channels == 1 else "RGB", "size": (height, width), "resize": image_resize(config)}


def _embed_images(model, dataset, config: TrainConfig, device) -> tuple[Tensor, Tensor]:
    """The joint-space embeddings of the readable images and their positions in ``dataset``."""
    model.eval()
    loader = DataLoader(
        dataset,
        batch_size=BATCH_SIZE,
        num_workers=config.num_workers,
        collate_fn=functools.partial(collate_samples, report=dataset.report),
    )
    embeddings, kept = [], []
    for batch in loader:
        if len(batch["index"]):
            embeddings.append(model.embed_images(batch["image"].to(device)).float().cpu())
            kept.append(batch["index"])
    if not kept:
        raise ConfigError(f"none of the {len(dataset)} evaluation images could be read")
    return torch.cat(embeddings), torch.cat(kept)


def _embed_texts(model, texts: list[str], device) -> Tensor:
    return torch.cat(
        [
            model.embed_texts(texts[start : start + BATCH_SIZE]).float().cpu()
            for start in range(0, len(texts), BATCH_SIZE)
        ]
    )


class _ImageFiles(Dataset):
    """Image files by position, decoded like the training images; an unreadable one is ``None``."""

    def __init__(self, paths: list[Path], *, mode: str, size: int | None, resize: str) -> None:
        self.paths, self.mode, self.resize = paths, mode, resize
        self.size = None if size is None else (size, size)
        self.report = SkipReport()

    def __len__(self) -> int:
        return len(self.paths)

    def __getitem__(self, index: int) -> Sample | None:
        try:
            image = decode_image(read_file(self.paths[index]), self.mode, self.size, self.resize)
        except BadSample as bad:
            self.report.record(bad.reason, os.fspath(self.paths[index]), index, bad.detail)
            return None
        self.report.record_good()
        return Sample(index=index, image=image, label=-1)
