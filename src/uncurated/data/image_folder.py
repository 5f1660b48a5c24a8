"""Images in one subfolder per class, read with Pillow."""

from __future__ import annotations

import os
from pathlib import Path

from torch.utils.data import Dataset

from .base import Sample
from .decode import check_image_options, decode_image, read_file
from .skip import BadSample, SkipReport

#: The file name suffixes taken for images (compared in lower case); other files are ignored.
IMAGE_EXTENSIONS = (".png", ".jpg", ".jpeg", ".bmp", ".gif", ".webp", ".tif", ".tiff")


class ImageFolderDataset(Dataset):
    """``root/CLASS/.../FILE``: every image file under a class folder, labelled by the folder.

    Args:
        root: the folder holding one subfolder per class. Class names are
            the subfolder names, sorted; the label of a class is its position.
        mode: ``"RGB"`` (3 channels) or ``"L"`` (1 channel); every image is
            converted to it.
        size: ``(height, width)`` or one int for square images to resize
            every image to (needed to stack images of different sizes into
            batches), or ``None`` to keep each image's size.
        resize: ``"stretch"`` or ``"crop"`` (:data:`~uncurated.data.decode.RESIZES`).
        report: where bad images are recorded; a new
            :class:`~uncurated.data.skip.SkipReport` if ``None``.

    The files are listed once, at construction: files whose name ends in one
    of :data:`IMAGE_EXTENSIONS` (any case), in subfolders at any depth,
    hidden files and folders (names starting with ``.``) left out. The index
    of a sample is its position in that list, sorted by class and then by
    path, so it stays the same as long as the folder does.

    A file that cannot be read or decoded is recorded in ``report`` and its
    item is ``None`` (see :mod:`uncurated.data.skip`).
    """

    def __init__(
        self,
        root: str | os.PathLike,
        *,
        mode: str = "RGB",
        size: int | tuple[int, int] | None = None,
        resize: str = "stretch",
        report: SkipReport | None = None,
    ) -> None:
        self.size = check_image_options(mode, size, resize)
        self.resize = resize
        self.mode = mode
        self.root = Path(root)
        if not self.root.is_dir():
            raise ValueError(f"root must be a folder with one subfolder per class; {self.root} is not a folder")
        self.classes = sorted(entry.name for entry in self.root.iterdir() if _visible(entry) and entry.is_dir())
        if not self.classes:
            raise ValueError(f"root must hold one subfolder per class; {self.root} has none")
        self.samples: list[tuple[Path, int]] = [
            (path, label) for label, name in enumerate(self.classes) for path in _image_files(self.root / name)
        ]
        self.report = SkipReport() if report is None else report

    def __len__(self) -> int:
        return len(self.samples)

    def __getitem__(self, index: int) -> Sample | None:
        path, label = self.samples[index]
        index %= len(self)
        try:
            image = decode_image(read_file(path), self.mode, self.size, self.resize)
        except BadSample as bad:
            self.report.record(bad.reason, str(path), index, bad.detail)
            return None
        self.report.record_good()
        return Sample(index=index, image=image, label=label)

    def __repr__(self) -> str:
        return f"ImageFolderDataset({str(self.root)!r}, {len(self)} images in {len(self.classes)} classes)"


def _visible(path: Path) -> bool:
    return not path.name.startswith(".")


def _image_files(folder: Path) -> list[Path]:
    """The image files under ``folder`` at any depth, hidden entries left out, sorted by relative path."""
    found: list[Path] = []
    for directory, subfolders, files in os.walk(folder):
        subfolders[:] = [name for name in subfolders if not name.startswith(".")]
        found.extend(
            Path(directory, name)
            for name in files
            if not name.startswith(".") and name.lower().endswith(IMAGE_EXTENSIONS)
        )
    return sorted(found, key=lambda path: path.relative_to(folder).as_posix())
