"""Retrieval test sets with several captions per image: Karpathy's COCO / Flickr30k JSON, or a CSV.

Karpathy's split files (``dataset_coco.json``, ``dataset_flickr30k.json``)
list ``images``, each with a ``filename`` (and for COCO a ``filepath``
folder), a ``split`` (``train``, ``restval``, ``val``, ``test``) and its
``sentences`` (``raw`` text, five per image); the images are read from a
folder holding those paths. A CSV in open_clip's layout (a header, an image
path and a caption a row, tab-separated by default) gives several captions
to an image by repeating its path; images are in the order they first appear.
"""

from __future__ import annotations

import csv
import json
import os
from dataclasses import dataclass
from pathlib import Path


@dataclass(frozen=True)
class CaptionSet:
    """Images and their captions: ``captions[k]`` describes ``image_paths[caption_image[k]]``."""

    image_paths: list[Path]
    captions: list[str]
    caption_image: list[int]


def read_caption_set(
    path: str | os.PathLike,
    *,
    images: str | os.PathLike | None = None,
    split: str = "test",
    img_key: str = "filepath",
    caption_key: str = "title",
    sep: str = "\t",
) -> CaptionSet:
    """The caption set in ``path`` (``.json``: Karpathy's layout, its ``split`` only; else a CSV).

    ``images`` is the folder the image paths are relative to (default: the file's folder).
    """
    path = Path(path)
    root = Path(images) if images is not None else path.parent
    if not path.is_file():
        raise ValueError(f"retrieval_file must be a Karpathy JSON or a CSV file; {path} is not a file")
    groups: dict[Path, list[str]] = {}
    if path.suffix.lower() == ".json":
        content = json.loads(path.read_text(encoding="utf-8"))
        if not isinstance(content, dict) or not isinstance(content.get("images"), list):
            raise ValueError(f"{path} is not in Karpathy's layout: it has no list of images")
        for entry in content["images"]:
            if entry.get("split") == split:
                image = root / entry.get("filepath", "") / entry["filename"]
                groups.setdefault(image, []).extend(sentence["raw"].strip() for sentence in entry["sentences"])
    else:
        with open(path, newline="", encoding="utf-8") as file:
            reader = csv.DictReader(file, delimiter=sep)
            missing = [key for key in (img_key, caption_key) if key not in (reader.fieldnames or [])]
            if missing:
                raise ValueError(
                    f"{path} has no column {missing[0]!r} (columns: {reader.fieldnames}, separator {sep!r})"
                )
            for row in reader:
                groups.setdefault(root / row[img_key], []).append(row[caption_key].strip())
    if not groups:
        raise ValueError(f"{path} holds no image" + (f" of split {split!r}" if path.suffix.lower() == ".json" else ""))
    image_paths = list(groups)
    captions = [caption for image in image_paths for caption in groups[image]]
    owners = [number for number, image in enumerate(image_paths) for _ in groups[image]]
    return CaptionSet(image_paths, captions, owners)
