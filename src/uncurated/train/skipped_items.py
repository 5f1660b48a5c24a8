"""The items the training data could not read: counted on every process, summed over the processes at every batch,
checked against ``max_skipped_fraction`` as the data streams, and kept in the run's record.

Each process counts the epoch's items it read, good and skipped per reason (:class:`~uncurated.data.SkipCounts`,
saved with every checkpoint). With each batch the processes sum those counts (in the all-reduce that already
says whether every process has a batch, :mod:`.trainer`), so every process knows the epoch's totals of all
processes and takes the same decision: once the processes together have seen :data:`MIN_ITEMS` items of the
epoch, a skipped fraction above ``max_skipped_fraction`` stops the run on every process at once, with the same
message and after a checkpoint of the last step; at the end of the epoch the limit applies whatever the count.

At the end of an epoch in which items were skipped, the main process prints the totals, the counts per reason with
examples, and each process's share; the same record goes into the run's ``report.json``
(``skipped_items``), and ``metrics.csv`` has a column per reason (``skipped_corrupt``, ...) with the run's
totals so far. The records of earlier epochs are saved with every checkpoint.
"""

from __future__ import annotations

import sys
from dataclasses import dataclass
from typing import Any

from ..data import REASONS, SkipCounts, SkipLimitExceeded
from .distributed import Distributed

#: The items the processes must have seen together in an epoch before ``max_skipped_fraction`` applies in the middle
#: of it, so that a bad file among the first few does not stop a run; at the end of the epoch it applies whatever
#: the count.
MIN_ITEMS = 50
#: The columns of ``metrics.csv`` of a run reading files: the run's skipped items so far, per reason.
COLUMNS = [f"skipped_{reason}" for reason in REASONS]


@dataclass(frozen=True)
class Breach:
    """Too many skipped items: what was exceeded, and the summary of the counts (the same on every process)."""

    what: str
    summary: str


def batch_counts(batch: dict | None) -> SkipCounts | None:
    """What ``batch`` read: its ``"skips"`` (taken out of it) where the data counts them, else its items, all good."""
    if batch is None:
        return None
    if "skips" in batch:
        return batch.pop("skips")
    counts = SkipCounts()
    counts.good = len(batch["index"])
    return counts


def counts_of(numbers: list[float]) -> dict[str, int]:
    """The good items and the skipped ones per reason of :meth:`SkippedItems.numbers`' layout, as integers."""
    good, *skipped = (round(value) for value in numbers)
    return {"good": good, **{reason: count for reason, count in zip(REASONS, skipped, strict=True) if count}}


class SkippedItems:
    """This process's counts of the current epoch, all processes' totals as last agreed, and the record of the
    earlier epochs (``max_fraction``: ``max_skipped_fraction``)."""

    def __init__(self, max_fraction: float, context: Distributed) -> None:
        self.max_fraction = max_fraction
        self.context = context
        self.epoch = SkipCounts()
        self.totals: dict[str, int] = {"good": 0}  # every process's items of the epoch, as of the last batch
        self.history: list[dict[str, Any]] = []  # one record per epoch that skipped items

    def numbers(self, batch: SkipCounts | None) -> list[float]:
        """This process's good items and skipped ones per reason (in :data:`~uncurated.data.REASONS`' order) of the
        epoch so far, ``batch`` included: the numbers the processes sum with each batch."""
        counts = self.epoch.copy().add(batch) if batch is not None else self.epoch
        return [float(counts.good), *(float(counts.counts[reason]) for reason in REASONS)]

    def agreed(self, numbers: list[float]) -> bool:
        """Take ``numbers``, the processes' sums of :meth:`numbers`, as the epoch's totals; return whether they
        exceed the limit in the middle of the epoch (at least :data:`MIN_ITEMS` items seen)."""
        self.totals = counts_of(numbers)
        return self._seen() >= MIN_ITEMS and self._fraction() > self.max_fraction

    def exceeded_at_end(self) -> bool:
        """Whether the epoch's totals exceed the limit, whatever their count."""
        return self._fraction() > self.max_fraction

    def _skipped(self) -> int:
        return sum(count for key, count in self.totals.items() if key != "good")

    def _seen(self) -> int:
        return self.totals["good"] + self._skipped()

    def _fraction(self) -> float:
        return self._skipped() / self._seen() if self._seen() else 0.0

    def run_totals(self) -> dict[str, int]:
        """The run's skipped items so far per reason, every process's: the earlier epochs' and this one's."""
        totals = dict.fromkeys(REASONS, 0)
        for record in [*self.history, {"reasons": self.totals}]:
            for reason in REASONS:
                totals[reason] += record["reasons"].get(reason, 0)
        return totals

    def metrics(self) -> dict[str, int]:
        """The :data:`COLUMNS` of a row of ``metrics.csv``."""
        return {f"skipped_{reason}": count for reason, count in self.run_totals().items()}

    def report(self) -> dict[str, Any]:
        """What ``report.json`` keeps: the run's totals per reason and each epoch's record."""
        return {"total": self.run_totals(), "epochs": list(self.history)}

    def end_epoch(self, epoch: int) -> Breach | None:
        """Record and print (main process) the epoch's skipped items with each process's share, and start the next
        epoch's counts; return the :class:`Breach` when they exceed the limit, whatever their count. A collective
        when any process skipped items (every process knows it alike from the totals)."""
        breach = None
        if self._skipped():
            merged, shares = self._gathered()
            self.history.append(self._record(epoch, merged, shares))
            if self.context.is_main:
                print(f"epoch {epoch}: {self._summary(merged, shares)}", file=sys.stderr, flush=True)
            if self._fraction() > self.max_fraction:
                breach = self._breach(epoch, merged, shares)
        self.epoch = SkipCounts()
        self.totals = {"good": 0}
        return breach

    def breach_now(self, epoch: int, batch: SkipCounts | None) -> Breach:
        """The limit's breach in the middle of ``epoch`` by ``batch`` (not yet counted, and added now: the run
        stops before training on it); a collective."""
        if batch is not None:
            self.epoch.add(batch)
        return self._breach(epoch, *self._gathered())

    def _breach(self, epoch: int, merged: SkipCounts, shares: list[tuple[int, int]]) -> Breach:
        seen, skipped = self._seen(), self._skipped()
        return Breach(
            f"{skipped / seen:.1%} of the {seen} items read in epoch {epoch} were skipped, more than "
            f"max_skipped_fraction = {self.max_fraction:g}",
            self._summary(merged, shares),
        )

    @staticmethod
    def refusal(breach: Breach, stopped: str) -> SkipLimitExceeded:
        """The error every process raises for ``breach``; ``stopped`` says where the run stopped, checkpointed."""
        return SkipLimitExceeded(
            f"{breach.what}; {stopped}. Fix or remove the bad data, or raise max_skipped_fraction, then continue "
            f"with resume=true.\n{breach.summary}"
        )

    def _gathered(self) -> tuple[SkipCounts, list[tuple[int, int]]]:
        """Every process's counts of the epoch merged (examples from the processes in rank order), and each one's
        (skipped, seen), by rank."""
        states = self.context.gather_object(self.epoch.state_dict())
        each = [SkipCounts.from_state_dict(state) for state in states]
        merged = SkipCounts()
        for counts in each:
            merged.add(counts)
        return merged, [(counts.skipped, counts.total) for counts in each]

    def _summary(self, merged: SkipCounts, shares: list[tuple[int, int]]) -> str:
        summary = merged.summary()
        if len(shares) > 1:
            parts = ", ".join(f"{skipped} of {seen} (rank {rank})" for rank, (skipped, seen) in enumerate(shares))
            summary += f"\n  per process: {parts}"
        return summary

    @staticmethod
    def _record(epoch: int, merged: SkipCounts, shares: list[tuple[int, int]]) -> dict[str, Any]:
        return {
            "epoch": epoch,
            "seen": merged.total,
            "skipped": merged.skipped,
            "reasons": dict(sorted(merged.counts.items())),
            "processes": [{"skipped": skipped, "seen": seen} for skipped, seen in shares],
            "examples": {reason: [str(skip) for skip in skips] for reason, skips in merged.examples.items()},
        }

    def state_dict(self) -> list[dict[str, Any]]:
        """What the checkpoint keeps besides each process's :attr:`epoch` counts: the earlier epochs' records."""
        return [dict(record) for record in self.history]

    def load_state_dict(self, history: list[dict[str, Any]]) -> None:
        self.history = [dict(record) for record in history]
