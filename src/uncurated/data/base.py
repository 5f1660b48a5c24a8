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

:class:`IndexedDataset` and :class:`StreamedDataset` are this contract as protocols: the training checks the
datasets of a format against them when it builds them, whatever registered the format.
"""

from __future__ import annotations

from collections.abc import Iterator
from typing import Protocol, TypedDict, runtime_checkable

from torch import Tensor


class Sample(TypedDict, total=False):
    index: int
    image: Tensor
    label: int
    caption: str


@runtime_checkable
class IndexedDataset(Protocol):
    """A map-style dataset: its length, and its sample at a persistent index (``None`` for one it cannot read)."""

    def __len__(self) -> int: ...

    def __getitem__(self, index: int, /) -> Sample | None: ...


@runtime_checkable
class StreamedDataset(Protocol):
    """A stream of samples (a ``torch.utils.data.IterableDataset``) and ``num_indices``, how many persistent
    indices its samples carry (the rows of the global objectives' per-sample state)."""

    num_indices: int

    def __iter__(self) -> Iterator[Sample | None]: ...
