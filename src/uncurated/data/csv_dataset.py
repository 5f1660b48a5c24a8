"""Image-text pairs listed in a CSV file, in open_clip's layout."""

from __future__ import annotations

import csv
import os
from pathlib import Path

from torch.utils.data import Dataset

from .base import Sample
from .decode import check_image_options, decode_caption, decode_image, read_file
from .skip import BadSample, SkipReport


class CsvImageTextDataset(Dataset):
    """One image-text pair per row of a CSV file with a header.

    The defaults are open_clip's (``--csv-img-key filepath``,
    ``--csv-caption-key title``, ``--csv-separator`` a tab), so its CSV files
    load unchanged.

    Args:
        path: the CSV file. Relative image paths are taken relative to the
            folder of the file; absolute ones as they are.
        img_key: the column holding the image paths.
        caption_key: the column holding the captions.
        sep: the field separator, one character.
        mode: ``"RGB"`` (3 channels) or ``"L"`` (1 channel).
        size: ``(height, width)`` or one int to resize every image to, or
            ``None`` to keep each image's size.
        resize: ``"stretch"`` or ``"crop"`` (:data:`~uncurated.data.decode.RESIZES`).
        report: where bad rows are recorded; a new
            :class:`~uncurated.data.skip.SkipReport` if ``None``.

    The index of a sample is its row, counted from 0 after the header. The
    file is read once, as UTF-8; images are read when an item is asked for.
    A row whose image is missing or broken, or whose caption is empty or not
    UTF-8, is recorded in ``report`` and its item is ``None``
    (see :mod:`uncurated.data.skip`). Samples have no label (-1).
    """

    def __init__(
        self,
        path: str | os.PathLike,
        img_key: str = "filepath",
        caption_key: str = "title",
        sep: str = "\t",
        *,
        mode: str = "RGB",
        size: int | tuple[int, int] | None = None,
        resize: str = "stretch",
        report: SkipReport | None = None,
    ) -> None:
        if not isinstance(sep, str) or len(sep) != 1:
            raise ValueError(f"sep must be one character, got {sep!r}")
        self.size = check_image_options(mode, size, resize)
        self.resize = resize
        self.mode = mode
        self.path = Path(path)
        # Bytes that are not UTF-8 become lone surrogates, which decode_caption rejects per row.
        with open(self.path, newline="", encoding="utf-8", errors="surrogateescape") as file:
            reader = csv.DictReader(file, delimiter=sep)
            columns = reader.fieldnames or []
            for name, key in (("img_key", img_key), ("caption_key", caption_key)):
                if key not in columns:
                    raise ValueError(
                        f"{name} must name a column of {self.path}; {key!r} is not one of {columns} (separator {sep!r})"
                    )
            rows = [(row[img_key] or "", row[caption_key] or "") for row in reader]
        self.image_paths = [entry for entry, _ in rows]
        self.captions = [caption for _, caption in rows]
        self.report = SkipReport() if report is None else report

    def __len__(self) -> int:
        return len(self.captions)

    def __getitem__(self, index: int) -> Sample | None:
        entry, caption = self.image_paths[index], self.captions[index]
        index %= len(self)
        try:
            if not entry.strip():
                raise BadSample("missing", "no image path")
            caption = decode_caption(caption)
            image = decode_image(read_file(self.path.parent / entry), self.mode, self.size, self.resize)
        except BadSample as bad:
            self.report.record(bad.reason, f"{self.path.name}: {entry}", index, bad.detail)
            return None
        self.report.record_good()
        return Sample(index=index, image=image, label=-1, caption=caption)

    def __repr__(self) -> str:
        return f"CsvImageTextDataset({str(self.path)!r}, {len(self)} rows)"
