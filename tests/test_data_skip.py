import functools
import pickle

import pytest
import torch
from torch.utils.data import DataLoader, Dataset

from uncurated.data import REASONS, BadSample, SkipLimitExceeded, SkipReport, collate_samples


def test_counts_per_reason_examples_and_summary():
    report = SkipReport(max_fraction=1.0, max_examples=2)
    report.record_good(7)
    for row in range(3):
        report.record("missing", "pairs.csv", index=row, detail="no such file")
    report.record("corrupt", "a.png")
    assert report.counts == {"missing": 3, "corrupt": 1}
    assert (report.good, report.skipped, report.total) == (7, 4, 11)
    assert report.fraction == pytest.approx(4 / 11)
    assert [skip.index for skip in report.examples["missing"]] == [0, 1]
    summary = report.summary()
    assert "skipped 4 of 11 items" in summary
    assert "missing: 3" in summary and "corrupt: 1" in summary
    assert "pairs.csv (index 0): no such file" in summary and "and 1 more" in summary
    assert summary.index("missing") < summary.index("corrupt")  # the most frequent first


def test_unknown_reason_is_rejected():
    with pytest.raises(ValueError, match="reason must be one of"):
        SkipReport().record("bad vibes", "x")
    with pytest.raises(ValueError, match="reason must be one of"):
        BadSample("bad vibes")
    assert "corrupt_shard" in REASONS and "caption_encoding" in REASONS


@pytest.mark.parametrize("max_fraction", [-0.1, 1.5])
def test_max_fraction_is_checked(max_fraction):
    with pytest.raises(ValueError, match=r"max_fraction must be in \[0, 1\]"):
        SkipReport(max_fraction)


def test_threshold_applies_once_enough_items_were_seen():
    report = SkipReport(max_fraction=0.2, min_items=10)
    report.record("corrupt", "first.png")
    report.record_good(7)
    report.record("corrupt", "second.png")  # 2 of 9 is too many, but 9 items are too few to tell
    assert report.total == 9
    with pytest.raises(SkipLimitExceeded, match=r"(?s)more than max_fraction = 0.2.*corrupt: 3"):
        report.record("corrupt", "third.png")  # 3 of 10


def test_check_applies_the_threshold_whatever_the_count():
    report = SkipReport(max_fraction=0.25)
    report.record_good(3)
    report.record("zero_byte", "empty.png")
    report.check()  # 1 of 4 = 0.25 is accepted
    report.record("zero_byte", "empty2.png")
    with pytest.raises(SkipLimitExceeded, match="zero_byte: 2"):
        report.check()


def test_drain_returns_what_was_recorded_since_the_previous_drain():
    report = SkipReport(max_fraction=1.0)
    report.record_good(2)
    report.record("missing", "a")
    first = report.drain()
    assert (first.good, dict(first.counts)) == (2, {"missing": 1})
    report.record("corrupt", "b")
    second = report.drain()
    assert (second.good, dict(second.counts)) == (0, {"corrupt": 1})
    assert report.drain().total == 0
    assert (report.good, report.skipped) == (2, 2)  # the totals stay


def test_merge_adds_counts_and_a_report_survives_pickling():
    epoch = SkipReport(max_fraction=1.0, max_examples=1)
    worker = SkipReport(max_fraction=1.0)
    worker.record_good(5)
    worker.record("truncated", "x.jpg", 3)
    worker.record("truncated", "y.jpg", 4)
    epoch.merge(pickle.loads(pickle.dumps(worker.drain())))
    assert (epoch.good, dict(epoch.counts)) == (5, {"truncated": 2})
    assert len(epoch.examples["truncated"]) == 1 and epoch.examples["truncated"][0].source == "x.jpg"


class Flaky(Dataset):
    """Every third item is bad: recorded in the report and returned as None."""

    def __init__(self, size):
        self.size = size
        self.report = SkipReport(max_fraction=1.0)

    def __len__(self):
        return self.size

    def __getitem__(self, index):
        if index % 3 == 0:
            self.report.record("corrupt", f"item-{index}", index)
            return None
        self.report.record_good()
        return {"index": index, "image": torch.full((1, 2, 2), index / 100), "label": index % 2, "caption": "c"}


@pytest.mark.parametrize("workers", [0, 2])
def test_collate_drops_skipped_items_and_carries_the_counts_to_the_loop(workers):
    dataset = Flaky(12)
    collate = functools.partial(collate_samples, report=dataset.report)
    loader = DataLoader(dataset, batch_size=4, num_workers=workers, collate_fn=collate)
    epoch = SkipReport(max_fraction=0.5)
    seen = []
    for batch in loader:
        epoch.merge(batch.pop("skips"))
        assert batch["image"].shape == (len(batch["index"]), 1, 2, 2)
        assert batch["caption"] == ["c"] * len(batch["index"])
        seen += batch["index"].tolist()
    epoch.check()
    assert sorted(seen) == [i for i in range(12) if i % 3]
    assert (epoch.good, dict(epoch.counts)) == (8, {"corrupt": 4})
    assert sorted(skip.index for skip in epoch.examples["corrupt"]) == [0, 3, 6, 9]


def test_a_batch_of_only_skipped_items_is_empty():
    report = SkipReport(max_fraction=1.0)
    report.record("missing", "a")
    batch = collate_samples([None, None], report=report)
    assert batch["index"].numel() == 0 and batch["skips"].skipped == 1
    assert "skips" not in collate_samples([None])
