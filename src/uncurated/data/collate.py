"""The DataLoader ``collate_fn`` of the package: drop skipped items, carry their report along."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch.utils.data import default_collate

from .base import Sample
from .skip import SkipReport


def collate_samples(samples: Sequence[Sample | None], report: SkipReport | None = None) -> dict:
    """Collate the good samples of a batch; with ``report``, attach what was skipped as ``batch["skips"]``.

    Datasets return (or yield) ``None`` for an item they skipped, after
    recording it in their :class:`~uncurated.data.skip.SkipReport`. This
    function drops the ``None`` items and collates the rest with
    :func:`torch.utils.data.default_collate`: ``image`` stacked, ``index``
    and ``label`` as LongTensors, ``caption`` a list of strings.

    Bind the dataset's report to get the skips too::

        collate = functools.partial(collate_samples, report=dataset.report)
        loader = DataLoader(dataset, batch_size=256, num_workers=8, collate_fn=collate)

    ``batch["skips"]`` is then the :class:`~uncurated.data.skip.SkipCounts`
    that the process reading the items recorded since its previous batch
    (``report.drain()``). The collate function runs where the items are
    read, in DataLoader workers too, so the counts travel with the batches to
    the training process; merge them there into an epoch report (the example
    in :mod:`uncurated.data.skip`).

    A batch whose items were all skipped holds an empty ``index`` (and
    ``skips``). Stacking needs images of one size: give file-based datasets a
    ``size``.
    """
    if report is not None and not isinstance(report, SkipReport):
        raise ValueError(f"report must be None or a SkipReport (the dataset's .report), got {type(report).__name__}")
    good = [sample for sample in samples if sample is not None]
    batch = default_collate(good) if good else {"index": torch.empty(0, dtype=torch.long)}
    if report is not None:
        batch["skips"] = report.drain()
    return batch
