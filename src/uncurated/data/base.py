"""What every dataset of the package yields: samples with a persistent index.

A dataset is a map-style ``torch.utils.data.Dataset`` whose items are
:class:`Sample` dictionaries, or, for data that does not fit in memory, an
iterable one yielding the same. Every sample carries ``index``, its
persistent position in the dataset (the key of the global objectives'
per-sample state), so a sample keeps its index across epochs, shuffles,
processes and restarts.

Keys of a sample:

* ``index`` (int): the persistent position in the dataset, in [0, len).
* ``image`` (Tensor): (C, H, W), float32 in [0, 1].
* ``label`` (int): the class, or -1 when unknown.
* ``caption`` (str): for image-text data.

Datasets held in memory as tensors (IDX files, digits, FashionCaptions) also
implement ``batch(indices) -> dict`` returning the same keys batched
(``image`` (B, C, H, W), ``index``/``label`` LongTensors, ``caption`` a list),
which the training loop prefers over per-item loading.

Datasets read from files (image folders, CSV files, tar shards) meet broken
data: for an item they cannot read they record why in their ``report`` and
return (or yield) ``None`` instead of a sample, which
:func:`~uncurated.data.collate.collate_samples` drops; see
:mod:`uncurated.data.skip` for how a training loop reports the skips.
"""

from __future__ import annotations

from typing import TypedDict

from torch import Tensor


class Sample(TypedDict, total=False):
    index: int
    image: Tensor
    label: int
    caption: str
