"""Image-text samples streamed from webdataset tar shards, for data that does not fit in memory.

A shard is a tar file (optionally gzip-compressed) whose members are grouped
into samples by key, as the ``webdataset`` library does: the key of
``dir/000123.jpg`` is ``dir/000123`` (the member's path up to the first dot
of its name) and the rest, ``jpg``, names the part. Consecutive members with
the same key form one sample. A sample needs an image (``jpg``, ``jpeg`` or
``png``) and a caption (``txt``); other parts are ignored. Shards are read
in streaming mode, one member at a time, by :mod:`tarfile` with a header
check of this module (``reader="tarfile"``, the default) or by the
``webdataset`` library's tar iterator (``reader="webdataset"``); both give
the same samples, indices and skip counts on sound shards, but the library
ends a shard damaged in the middle quietly, as :mod:`tarfile` does, where
the default reader records it as ``corrupt_shard``
(``benchmarks/webdataset_reader.py`` measures both).
"""

from __future__ import annotations

import itertools
import os
import re
import tarfile
from collections.abc import Iterator, Sequence
from typing import BinaryIO

import numpy as np
from torch.utils.data import IterableDataset, get_worker_info

from ..data_defaults import SHARD_READERS as READERS
from ..extras import require
from ..process.group import launched_place
from ..validation import check_choice, check_integer
from .base import Sample
from .decode import check_image_options, decode_caption, decode_image
from .skip import BadSample, SkipReport

#: The parts that hold the image, in order of preference, and the part that holds the caption.
IMAGE_PARTS = ("jpg", "jpeg", "png")
CAPTION_PART = "txt"

_BRACES = re.compile(r"\{(\d+)\.\.(\d+)\}")


def expand_shards(shards: str | os.PathLike | Sequence[str | os.PathLike]) -> list[str]:
    """The shard paths named by ``shards``: a path, a brace pattern, or a sequence of them.

    A brace pattern names a numbered range as open_clip and webdataset write
    it: ``data/{000..123}.tar`` is ``data/000.tar`` to ``data/123.tar``, each
    number as wide as the range's first bound. Several ranges expand to their
    product.
    """
    if isinstance(shards, (str, os.PathLike)):
        shards = [shards]
    expanded = []
    for shard in shards:
        pending = [os.fspath(shard)]
        while pending:
            pattern = pending.pop(0)
            match = _BRACES.search(pattern)
            if match is None:
                expanded.append(pattern)
                continue
            first, last = match.group(1), match.group(2)
            if int(last) < int(first):
                raise ValueError(f"shards: the range {match.group(0)} of {pattern!r} runs backwards")
            head, tail = pattern[: match.start()], pattern[match.end() :]
            pending[:0] = [f"{head}{number:0{len(first)}d}{tail}" for number in range(int(first), int(last) + 1)]
    if not expanded:
        raise ValueError("shards must name at least one shard")
    return expanded


class WebDatasetShards(IterableDataset):
    """An iterable dataset of image-text samples read from tar shards.

    Args:
        shards: the shard files: a path, a brace pattern such as
            ``"data/{00000..00099}.tar"``, or a sequence of them
            (:func:`expand_shards`). Local files only; nothing is downloaded.
        mode: ``"RGB"`` (3 channels) or ``"L"`` (1 channel).
        size: ``(height, width)`` or one int to resize every image to, or
            ``None`` to keep each image's size.
        resize: ``"stretch"`` or ``"crop"`` (:data:`~uncurated.data.decode.RESIZES`).
        samples_per_shard: an upper bound on the number of samples of any
            shard, which fixes the indices (below); an integer >= 1.
        shuffle_shards: visit the shards in a new order each epoch, drawn
            from ``seed`` and the epoch (:meth:`set_epoch`).
        shuffle_buffer: shuffle the samples of each reader through a buffer of
            this many samples, held undecoded (0: keep the shards' order).
        resampled: each reader draws shards with replacement from all of
            them, without end (open_clip's ``--dataset-resampled``); the
            consumer decides where an epoch ends.
        seed: the seed of the shuffles and draws.
        reader: ``"tarfile"`` or ``"webdataset"`` (:data:`READERS`; the module's documentation).
        report: where bad samples and shards are recorded; a new
            :class:`~uncurated.data.skip.SkipReport` if ``None``.

    **Indices.** The sample at position ``p`` (counted from 0, bad samples
    included) of the shard at position ``s`` of the expanded shard list has
    the index ``s * samples_per_shard + p``. It depends only on the shard list
    and the shard's content, never on shuffling, workers or ranks, and lies
    in ``[0, num_indices)``; the global objectives take ``num_indices`` as
    their number of samples (indices of short shards stay unused). A shard
    longer than ``samples_per_shard`` raises ``ValueError``.

    **Random order.** Every draw is a function of ``seed``, the epoch and the
    reader, so that an epoch read again reads the same samples in the same
    order: the shard order from ``(seed, epoch)``, the buffer of reader ``i``
    (rank ``r``'s worker ``k`` of ``K``: ``i = r K + k``) from
    ``(seed, epoch, i)``, and its resampled shards from those three and a
    stream of their own.

    **Splitting.** Of the epoch's order, rank ``r`` of ``W`` reads every
    ``W``-th shard from the ``r``-th, and its ``K`` DataLoader workers split
    those the same way (worker ``k`` every ``K``-th from the ``k``-th), so
    every rank reads as many shards as the others when ``W`` divides their
    number, whatever ``K``; ``uncurated train`` refuses other shard counts.
    The rank and world size come from ``torch.distributed`` when it is
    initialised, else from the ``RANK`` and ``WORLD_SIZE`` variables that
    ``torchrun`` sets. A reader with no shard (fewer shards than ranks, or than
    a rank's workers) reads nothing. Resampled, nothing is split: every reader
    draws from every shard, and stops only once as many shards in a row as
    there are gave it no sample (all missing or empty).

    **Bad data.** A sample whose image is missing or broken or whose caption
    is missing, empty or not UTF-8 is recorded in ``report`` and yielded as
    ``None``; a shard that cannot be opened or read to its end is recorded
    once (``missing``, ``unreadable`` or ``corrupt_shard``); the samples
    completed before the damage are kept, the one being read when it is met
    is lost with the rest of the shard. Batch with
    :func:`~uncurated.data.collate.collate_samples` bound to ``report`` (see
    :mod:`uncurated.data.skip`).
    """

    def __init__(
        self,
        shards: str | os.PathLike | Sequence[str | os.PathLike],
        *,
        mode: str = "RGB",
        size: int | tuple[int, int] | None = None,
        resize: str = "stretch",
        samples_per_shard: int = 10_000,
        shuffle_shards: bool = False,
        shuffle_buffer: int = 0,
        resampled: bool = False,
        seed: int = 0,
        reader: str = "tarfile",
        report: SkipReport | None = None,
    ) -> None:
        self.shards = expand_shards(shards)
        self.size = check_image_options(mode, size, resize)
        self.resize = resize
        self.mode = mode
        self.samples_per_shard = check_integer("samples_per_shard", samples_per_shard, 1)
        self.shuffle_shards = bool(shuffle_shards)
        self.shuffle_buffer = check_integer("shuffle_buffer", shuffle_buffer, 0)
        self.resampled = bool(resampled)
        self.seed = check_integer("seed", seed, 0)
        self.reader = check_choice("reader", reader, READERS)
        if self.reader == "webdataset":  # now: inside the reading loop a missing library would pass as a bad shard
            require("webdataset.tariterators", "webdataset", "reader='webdataset' (shard_reader=webdataset)")
        self.epoch = 0
        self.report = SkipReport() if report is None else report

    @property
    def num_indices(self) -> int:
        """The size of the index space: every index lies in ``[0, num_indices)``."""
        return len(self.shards) * self.samples_per_shard

    def set_epoch(self, epoch: int) -> None:
        """Set the epoch that seeds the shuffles; call it before each epoch's iteration.

        DataLoader workers copy the dataset when an iteration starts, so with
        ``persistent_workers=True`` the new epoch does not reach them.
        """
        self.epoch = check_integer("epoch", epoch, 0)

    def reader_shards(self) -> list[int]:
        """The positions, in the shard list, of the shards this reader reads this epoch, in reading order (not
        resampled)."""
        order = np.arange(len(self.shards))
        if self.shuffle_shards:
            order = np.random.default_rng([self.seed, self.epoch]).permutation(order)
        rank, ranks, worker, workers = _place()
        return order[rank::ranks][worker::workers].tolist()

    def __iter__(self) -> Iterator[Sample | None]:
        reader = _reader()
        encoded: Iterator[_Encoded]
        if self.resampled:
            encoded = self._resampled_samples(reader)
        else:
            encoded = (item for number in self.reader_shards() for item in self._shard_samples(number))
        if self.shuffle_buffer:
            encoded = _shuffled(encoded, self.shuffle_buffer, np.random.default_rng([self.seed, self.epoch, reader]))
        return (self._sample(*item) for item in encoded)

    def _resampled_samples(self, reader: int) -> Iterator[_Encoded]:
        """The samples of shards drawn with replacement from every shard, for ``reader`` in this epoch; they end
        once as many shards in a row as there are held no sample."""
        draws = np.random.default_rng(np.random.SeedSequence([self.seed, self.epoch, reader], spawn_key=(1,)))
        empty = 0
        while empty < len(self.shards):
            found = False
            for item in self._shard_samples(int(draws.integers(len(self.shards)))):
                found = True
                yield item
            empty = 0 if found else empty + 1

    def _shard_samples(self, number: int) -> Iterator[_Encoded]:
        path = self.shards[number]
        try:
            with open(path, "rb") as file:
                yield from self._file_samples(number, file)
        except FileNotFoundError:
            self.report.record("missing", path, detail="no such shard")
        except OSError as error:  # reading errors are caught inside: this one is from open()
            self.report.record("unreadable", path, detail=error.strerror or type(error).__name__)

    def _file_samples(self, number: int, file: BinaryIO) -> Iterator[_Encoded]:
        path = self.shards[number]
        samples = _read_shard(file) if self.reader == "tarfile" else _read_shard_with_library(file)
        for position in itertools.count():
            try:
                key, parts = next(samples)
            except StopIteration:
                return
            except Exception as error:  # damaged bytes make tarfile, gzip and zlib raise many exception types
                detail = f"after {position} samples: {type(error).__name__}: {error}"
                self.report.record("corrupt_shard", path, detail=detail)
                return
            if position >= self.samples_per_shard:
                raise ValueError(
                    f"samples_per_shard must be at least the number of samples of every shard; "
                    f"{path} holds more than {self.samples_per_shard}"
                )
            yield number * self.samples_per_shard + position, f"{path}:{key}", parts

    def _sample(self, index: int, source: str, parts: dict[str, bytes]) -> Sample | None:
        try:
            image_part = next((name for name in IMAGE_PARTS if name in parts), None)
            if image_part is None:
                raise BadSample("missing", f"no {', '.join(IMAGE_PARTS)} part")
            if CAPTION_PART not in parts:
                raise BadSample("missing", f"no {CAPTION_PART} part")
            caption = decode_caption(parts[CAPTION_PART])
            image = decode_image(parts[image_part], self.mode, self.size, self.resize)
        except BadSample as bad:
            self.report.record(bad.reason, source, index, bad.detail)
            return None
        self.report.record_good()
        return Sample(index=index, image=image, label=-1, caption=caption)

    def __repr__(self) -> str:
        return f"WebDatasetShards({len(self.shards)} shards, num_indices={self.num_indices})"


class _StrictTarInfo(tarfile.TarInfo):
    """A TarInfo that turns damage into ``ReadError`` where :mod:`tarfile` would stop as if at the end.

    After the first member, ``tarfile`` ends the archive quietly at a header
    that fails its checksum, at a partial header block and where the file
    ends without the end-of-archive blocks; a shard damaged in the middle
    would lose its remaining samples unnoticed.
    """

    @classmethod
    def fromtarfile(cls, tar: tarfile.TarFile) -> _StrictTarInfo:
        try:
            return super().fromtarfile(tar)
        # tarfile's own header errors, which typeshed does not declare (they are not in tarfile.__all__)
        except (tarfile.InvalidHeaderError, tarfile.TruncatedHeaderError, tarfile.EmptyHeaderError) as error:  # type: ignore[attr-defined]
            raise tarfile.ReadError(f"damaged archive at byte {tar.offset}: {error}") from error


def _read_shard(file: BinaryIO) -> Iterator[tuple[str, dict[str, bytes]]]:
    """The samples of the shard open as ``file`` as ``(key, {part: bytes})``, in order."""
    with tarfile.open(fileobj=file, mode="r|*", tarinfo=_StrictTarInfo) as tar:
        key: str | None = None
        parts: dict[str, bytes] = {}
        for member in tar:
            tar.members = []  # type: ignore[attr-defined]  # a streamed archive would otherwise keep every header
            directory, _, name = member.name.rpartition("/")
            stem, dot, part = name.partition(".")
            if not member.isfile() or not dot or not stem:
                continue
            member_key = f"{directory}/{stem}" if directory else stem
            if member_key != key:
                if key is not None:
                    yield key, parts
                key, parts = member_key, {}
            content = tar.extractfile(member)
            if content is None:  # a regular file always has content; tarfile's type allows None
                raise tarfile.ReadError(f"{member.name}: a file member without content")
            parts[part.lower()] = content.read()
        if key is not None:
            yield key, parts


def _read_shard_with_library(file: BinaryIO) -> Iterator[tuple[str, dict[str, bytes]]]:
    """The samples of the shard open as ``file``, grouped by the ``webdataset`` library (imported here)."""
    from webdataset.tariterators import group_by_keys, tar_file_iterator  # present: checked by WebDatasetShards

    members = ({**member, "__url__": None} for member in tar_file_iterator(file))  # group_by_keys reads the URL
    for sample in group_by_keys(members):
        yield sample["__key__"], {part: value for part, value in sample.items() if not part.startswith("__")}


#: A sample as read from its shard, not decoded: its index, where it comes from (``path:key``) and its parts.
_Encoded = tuple[int, str, dict[str, bytes]]


def _reader() -> int:
    """This reader's number among every rank's workers: ``rank * workers + worker``."""
    rank, _, worker, workers = _place()
    return rank * workers + worker


def _place() -> tuple[int, int, int, int]:
    """This reader's place: its rank and the world size (the process group's, :func:`launched_place`), its
    DataLoader worker and the rank's number of workers."""
    rank, world = launched_place()
    info = get_worker_info()
    worker, workers = (info.id, info.num_workers) if info is not None else (0, 1)
    return rank, world, worker, workers


def _shuffled(items: Iterator, size: int, rng: np.random.Generator) -> Iterator:
    """``items`` in a random order, drawn through a buffer of ``size`` items."""
    buffer = []
    for item in items:
        buffer.append(item)
        if len(buffer) >= size:
            chosen = int(rng.integers(len(buffer)))
            buffer[chosen], buffer[-1] = buffer[-1], buffer[chosen]
            yield buffer.pop()
    rng.shuffle(buffer)
    yield from buffer
