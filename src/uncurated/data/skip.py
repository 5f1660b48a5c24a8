"""Bad samples are skipped, counted per reason and reported, never fatal one by one.

Uncurated data has broken files: zero-byte or truncated images, files that are
not images at all, captions that are empty or not UTF-8, rows naming files
that do not exist, shards cut off in the middle. A dataset that meets one
records it in its :class:`SkipReport` and moves on: a map-style dataset
returns ``None`` from ``__getitem__``, an iterable one yields ``None``.
:func:`~uncurated.data.collate.collate_samples`, bound to the dataset's
report, drops those ``None`` items from each batch and attaches what was
skipped since the previous batch, so the counts reach the training process
even from DataLoader workers.

A run must not go on quietly when much of its data is broken: a report raises
:class:`SkipLimitExceeded` when more than ``max_fraction`` of the items it has
seen were skipped, once it has seen ``min_items`` items, and :meth:`check`
applies the threshold whatever the count.

How a training loop reports it, once per epoch::

    collate = functools.partial(collate_samples, report=dataset.report)
    loader = DataLoader(dataset, batch_size=256, num_workers=8, collate_fn=collate)
    for epoch in range(epochs):
        skips = SkipReport(max_fraction=0.05)
        for batch in loader:
            skips.merge(batch.pop("skips"))      # raises once too much is broken
            if len(batch["index"]) == 0:
                continue                         # every item of the batch was bad
            ...
        skips.check()                            # the whole epoch against the threshold
        if skips.skipped:
            log.warning(skips.summary())         # counts per reason and examples

The epoch report counts each item once per epoch; ``dataset.report`` keeps the
running totals of the process that read the items.
"""

from __future__ import annotations

import dataclasses
import os
from collections import Counter
from dataclasses import dataclass

from ..errors import RunStopped
from ..validation import check_choice, check_integer, check_range

#: Why an item was skipped.
REASONS = {
    "missing": "a file, shard or sample part named by the data does not exist",
    "unreadable": "a file exists but cannot be read (permissions, a folder, an I/O error)",
    "zero_byte": "an image file is empty",
    "truncated": "an image file ends before its data does",
    "corrupt": "an image file is not a decodable image",
    "wrong_mode": "an image has a pixel format that has no faithful 8-bit conversion (16-bit, 32-bit, float)",
    "empty_caption": "a caption is empty or only whitespace",
    "caption_encoding": "a caption is not valid UTF-8",
    "corrupt_shard": "a tar shard cannot be read to its end; the samples completed before the damage are kept",
}


class BadSample(Exception):
    """Raised by the decoders for an item that must be skipped; ``reason`` is one of :data:`REASONS`."""

    def __init__(self, reason: str, detail: str = "") -> None:
        check_choice("reason", reason, REASONS)
        super().__init__(f"{reason}: {detail}" if detail else reason)
        self.reason = reason
        self.detail = detail


class SkipLimitExceeded(RunStopped, RuntimeError):
    """More than the accepted fraction of the items was skipped; the message holds the report's summary."""


@dataclass(frozen=True)
class Skip:
    """One skipped item: why, where it came from, and its persistent index when it has one."""

    reason: str
    source: str
    index: int | None = None
    detail: str = ""

    def __str__(self) -> str:
        where = self.source if self.index is None else f"{self.source} (index {self.index})"
        return f"{where}: {self.detail}" if self.detail else where


class SkipCounts:
    """Counts of good and skipped items, per reason, with the first ``max_examples`` examples of each."""

    def __init__(self, max_examples: int = 5) -> None:
        self.max_examples = check_integer("max_examples", max_examples, 0)
        self.good = 0
        self.counts: Counter[str] = Counter()
        self.examples: dict[str, list[Skip]] = {}

    @property
    def skipped(self) -> int:
        """The number of skipped items."""
        return sum(self.counts.values())

    @property
    def total(self) -> int:
        """The number of items seen, good or skipped."""
        return self.good + self.skipped

    @property
    def fraction(self) -> float:
        """The fraction of the items seen that were skipped (0 before any item)."""
        return self.skipped / self.total if self.total else 0.0

    def summary(self) -> str:
        """A few lines of text: the totals, then each reason with its count and examples."""
        lines = [f"skipped {self.skipped} of {self.total} items ({self.fraction:.2%})"]
        for reason, count in sorted(self.counts.items(), key=lambda item: (-item[1], item[0])):
            examples = self.examples.get(reason, [])
            lines.append(f"  {reason}: {count} ({REASONS[reason]})")
            lines.extend(f"    {example}" for example in examples)
            if count > len(examples):
                lines.append(f"    ... and {count - len(examples)} more")
        return "\n".join(lines)

    def add(self, other: SkipCounts) -> SkipCounts:
        """Add the counts and examples of ``other`` (no threshold is applied) and return self."""
        self._update(other)
        return self

    def copy(self) -> SkipCounts:
        """A plain :class:`SkipCounts` with the same counts and examples (e.g. to save with a checkpoint)."""
        copied = SkipCounts(self.max_examples)
        copied._update(self)
        return copied

    def state_dict(self) -> dict:
        """The counts and examples as plain values, for a checkpoint: ``max_examples``, ``good``,
        ``counts`` (reason -> count) and ``examples`` (reason -> list of :class:`Skip` fields as dicts)."""
        return {
            "max_examples": self.max_examples,
            "good": self.good,
            "counts": dict(self.counts),
            "examples": {
                reason: [dataclasses.asdict(skip) for skip in skips] for reason, skips in self.examples.items()
            },
        }

    @staticmethod
    def from_state_dict(state: dict) -> SkipCounts:
        """The counts saved by :meth:`state_dict`; a reason or count it cannot have written raises
        ``ValueError``, an example with other fields than :class:`Skip`'s ``TypeError``."""
        counts = SkipCounts(state["max_examples"])
        counts.good = check_integer("good", state["good"], 0)
        for reason, count in state["counts"].items():
            counts.counts[check_choice("reason", reason, REASONS)] = check_integer(f"counts[{reason!r}]", count, 0)
        for reason, skips in state["examples"].items():
            counts.examples[check_choice("reason", reason, REASONS)] = [Skip(**skip) for skip in skips]
        return counts

    def __eq__(self, other: object) -> bool:
        if not isinstance(other, SkipCounts):
            return NotImplemented
        return (self.good, self.counts, self.examples) == (other.good, other.counts, other.examples)

    # Unhashable, as a class that defines __eq__ alone is (Python sets its __hash__ to None).

    def __repr__(self) -> str:
        counts = "".join(f", {reason}={count}" for reason, count in sorted(self.counts.items()))
        return f"{type(self).__name__}(good={self.good}, skipped={self.skipped}{counts})"

    def _add(self, good: int, skip: Skip | None = None) -> None:
        self.good += good
        if skip is not None:
            self.counts[skip.reason] += 1
            examples = self.examples.setdefault(skip.reason, [])
            if len(examples) < self.max_examples:
                examples.append(skip)

    def _update(self, other: SkipCounts) -> None:
        self.good += other.good
        self.counts.update(other.counts)
        for reason, examples in other.examples.items():
            kept = self.examples.setdefault(reason, [])
            kept.extend(examples[: max(0, self.max_examples - len(kept))])


class SkipReport(SkipCounts):
    """The running :class:`SkipCounts` of a dataset or an epoch, with a threshold.

    Args:
        max_fraction: the largest accepted fraction of skipped items, in [0, 1];
            1 never raises.
        min_items: the number of items to see before the threshold applies by
            itself, so that one bad file among the first few does not stop a
            run; an integer >= 1. :meth:`check` ignores it.
        max_examples: how many examples to keep per reason; an integer >= 0.
        key: the name of the threshold in the error message, e.g. the
            configuration key it came from (``max_skipped_fraction``).

    Besides its totals, a report keeps what was recorded since the last
    :meth:`drain` in the current process, which is how
    :func:`~uncurated.data.collate.collate_samples` sends each batch's skips
    from a DataLoader worker to the training process. A report copied into a
    worker process starts that part afresh, so nothing is sent twice.
    """

    def __init__(
        self, max_fraction: float = 0.05, *, min_items: int = 1000, max_examples: int = 5, key: str = "max_fraction"
    ) -> None:
        super().__init__(max_examples)
        self.max_fraction = check_range(key, max_fraction, 0.0, 1.0)
        self.key = key
        self.min_items = check_integer("min_items", min_items, 1)
        self._since_drain = SkipCounts(max_examples)
        self._pid = os.getpid()

    def record_good(self, count: int = 1) -> None:
        """Count ``count`` items that were read successfully."""
        check_integer("count", count, 0)
        self._add(count)
        self._pending()._add(count)
        self._enforce()

    def record(self, reason: str, source: str, index: int | None = None, detail: str = "") -> None:
        """Count one skipped item; ``reason`` is one of :data:`REASONS`.

        Raises :class:`SkipLimitExceeded` when the threshold is exceeded (see the class).
        """
        check_choice("reason", reason, REASONS)
        skip = Skip(reason, str(source), index, detail)
        self._add(0, skip)
        self._pending()._add(0, skip)
        self._enforce()

    def merge(self, other: SkipCounts) -> SkipReport:
        """Add the counts and examples of ``other`` (a batch's ``"skips"``, a worker's report) and return self.

        Raises :class:`SkipLimitExceeded` when the threshold is exceeded (see the class).
        """
        self._update(other)
        self._pending()._update(other)
        self._enforce()
        return self

    def drain(self) -> SkipCounts:
        """What this process recorded since the previous call, which starts the next period."""
        drained = self._pending()
        self._since_drain = SkipCounts(self.max_examples)
        return drained

    def check(self) -> None:
        """Raise :class:`SkipLimitExceeded` if more than ``max_fraction`` of the items seen were skipped."""
        if self.fraction > self.max_fraction:
            raise SkipLimitExceeded(
                f"{self.fraction:.1%} of the items were skipped, more than {self.key} = {self.max_fraction:g}; "
                f"fix or remove the bad data, or raise {self.key}.\n{self.summary()}"
            )

    def _pending(self) -> SkipCounts:
        if os.getpid() != self._pid:  # a copy in a new process: what is pending belongs to the parent
            self._since_drain = SkipCounts(self.max_examples)
            self._pid = os.getpid()
        return self._since_drain

    def _enforce(self) -> None:
        if self.total >= self.min_items:
            self.check()
