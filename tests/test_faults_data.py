"""Bad data in training: every bad sample of every kind is skipped, counted under its reason with its source,
reported at the end of the epoch (even across a kill), and too many stop the run naming the key."""

import csv
import io
import json
import re

import numpy as np
import pytest
from imagefiles import BAD_IMAGES, encode, pattern, write_tar
from PIL import Image

from uncurated.data import SkipLimitExceeded
from uncurated.train import load_config, train
from uncurated.train.checkpoint import latest_checkpoint, read_manifest
from uncurated.train.trainer import Trainer

pytest_plugins = ["faults_summary"]

ROWS, BATCH = 64, 8


def float_tiff() -> bytes:
    buffer = io.BytesIO()
    Image.fromarray(np.full((8, 8), 0.5, dtype=np.float32)).save(buffer, "TIFF")
    return buffer.getvalue()


#: Bad image files by the reason they must be counted under.
BAD_FILES = [(reason, content) for reason, content in BAD_IMAGES.items()] + [("wrong_mode", float_tiff())]


def good_png(seed: int) -> bytes:
    return encode(pattern(seed, size=8))


def write_csv(root) -> tuple[dict[str, int], list[str]]:
    """ROWS rows with every kind of bad row; return the injected counts by reason and the bad sources."""
    (root / "images").mkdir(parents=True)
    bad = {"missing": 2, "empty_caption": 1, "caption_encoding": 1}
    rows, sources = [b"filepath\ttitle"], []
    for number, (reason, content) in enumerate(BAD_FILES):
        (root / "images" / f"bad{number}.png").write_bytes(content)
        rows.append(f"images/bad{number}.png\ta bad image".encode())
        bad[reason] = bad.get(reason, 0) + 1
        sources.append(f"images/bad{number}.png")
    rows += [
        b"images/nowhere.png\ta missing image",
        b"\tno path at all",
        b"images/good0.png\t   ",
        b"images/good1.png\tnot \xff\xfe utf-8",
    ]
    sources += ["images/nowhere.png", "images/good0.png", "images/good1.png"]
    for number in range(ROWS - len(rows) + 3):  # good0 and good1 serve the bad captions above
        (root / "images" / f"good{number}.png").write_bytes(good_png(number))
        if number > 1:
            rows.append(f"images/good{number}.png\ta pattern number {number}".encode())
    (root / "pairs.tsv").write_bytes(b"\n".join(rows) + b"\n")
    assert len(rows) - 1 == ROWS
    return bad, sources


def write_folder(root) -> tuple[dict[str, int], list[str]]:
    bad, sources = {}, []
    for label in range(2):
        (root / f"class{label}").mkdir(parents=True)
    for number, (reason, content) in enumerate(BAD_FILES):
        (root / "class1" / f"bad{number}.png").write_bytes(content)
        bad[reason] = bad.get(reason, 0) + 1
        sources.append(f"bad{number}.png")
    for number in range(ROWS - len(BAD_FILES)):
        (root / f"class{number % 2}" / f"good{number:02d}.png").write_bytes(good_png(number))
    return bad, sources


def write_shards(root) -> tuple[dict[str, int], list[str]]:
    """A shard with bad samples of every kind and a shard cut in the middle; ROWS samples were written."""
    root.mkdir(parents=True)
    members = []
    for number in range(28):
        members += [(f"{number:03d}.png", good_png(number)), (f"{number:03d}.txt", f"pattern {number}".encode())]
    members += [
        ("b0.png", BAD_IMAGES["corrupt"]),
        ("b0.txt", b"corrupt image"),
        ("b1.png", good_png(1)),
        ("b2.png", good_png(2)),
        ("b2.txt", b"\xff\xfe"),
        ("b3.png", good_png(3)),
        ("b3.txt", b" "),
    ]
    write_tar(root / "shard-0.tar", members)
    second = [(f"s{number:03d}.png", good_png(number)) for number in range(32)]
    second = [member for number, png in enumerate(second) for member in (png, (f"s{number:03d}.txt", b"a pattern"))]
    data = write_tar(root / "shard-1.tar", second).read_bytes()
    (root / "shard-1.tar").write_bytes(data[: len(data) // 2] + b"\x13" * 700 + data[len(data) // 2 + 700 :])
    bad = {"corrupt": 1, "missing": 1, "caption_encoding": 1, "empty_caption": 1, "corrupt_shard": 1}
    return bad, ["shard-0.tar:b0", "shard-0.tar:b1", "shard-0.tar:b2", "shard-0.tar:b3", "shard-1.tar"]


FORMATS = {
    "csv": (write_csv, "pairs.tsv", ["pipeline=image_text", "objective=clip"]),
    "image-folder": (write_folder, "", ["pipeline=two_view", "objective=simclr"]),
    "webdataset": (
        write_shards,
        "shard-{0..1}.tar",
        ["pipeline=image_text", "objective=clip", "steps_per_epoch=100", "epochs=0.1", "samples_per_shard=64"],
    ),
}


def common(tmp_path, source: str) -> list[str]:
    writer, entry, extra = FORMATS[source]
    return [
        f"out={tmp_path}",
        "progress=false",
        f"dataset={source}",
        f"data_dir={tmp_path / 'data' / entry}",
        "image_mode=L",
        "image_size=8",
        "augment=digits",
        "image_encoder=mlp",
        "probe_layer=encoder",
        "widths=[16]",
        "projection_dim=8",
        f"batch_size={BATCH}",
        "epochs=1",
        "text_width=16",
        "text_heads=2",
        "text_layers=1",
        "max_caption_length=8",
        "max_skipped_fraction=0.25",
        *extra,
    ]


def reported(err: str) -> tuple[int, int, dict[str, int]]:
    """The skipped and seen totals and the counts per reason of the epoch report in ``err``."""
    total = re.search(r"epoch \d+: skipped (\d+) of (\d+) items", err)
    assert total, err
    summary = err[total.start() :]
    counts = {reason: int(count) for reason, count in re.findall(r"^  (\w+): (\d+) \(", summary, re.MULTILINE)}
    return int(total.group(1)), int(total.group(2)), counts


@pytest.mark.parametrize("source", FORMATS)
def test_every_bad_sample_is_skipped_counted_by_reason_and_reported_with_its_source(
    tmp_path, source, capsys, fault_record
):
    bad, sources = FORMATS[source][0](tmp_path / "data")
    train(load_config([*common(tmp_path, source), "name=run"]))
    err = capsys.readouterr().err
    skipped, seen, counts = reported(err)
    assert counts == bad
    assert skipped == sum(bad.values())
    if source != "webdataset":  # every row is visited once; a cut shard's later samples are never seen
        assert seen == ROWS
    for where in sources:
        assert where in err, where
    fault_record("bad data", sum(bad.values()), sum(min(counts.get(reason, 0), n) for reason, n in bad.items()))


def test_too_many_bad_samples_stop_the_run_naming_the_key(tmp_path, fault_record):
    write_csv(tmp_path / "data")
    with pytest.raises(SkipLimitExceeded, match=r"more than max_skipped_fraction = 0.1; .*raise max_skipped_fraction"):
        train(load_config([*common(tmp_path, "csv"), "name=strict", "max_skipped_fraction=0.1"]))
    fault_record("bad data", 1, 1)


def test_an_epoch_cut_by_a_kill_still_reports_every_bad_sample(tmp_path, monkeypatch, capsys, fault_record):
    bad, _ = write_csv(tmp_path / "data")
    original, calls = Trainer.step, {"count": 0}

    def dying_step(self, batch):
        calls["count"] += 1
        if calls["count"] == 6:  # after the checkpoint of step 4
            raise KeyboardInterrupt("killed")
        return original(self, batch)

    monkeypatch.setattr(Trainer, "step", dying_step)
    args = [*common(tmp_path, "csv"), "name=cut", "checkpoint_every=4"]
    with pytest.raises(KeyboardInterrupt):
        train(load_config(args))
    monkeypatch.setattr(Trainer, "step", original)
    capsys.readouterr()
    train(load_config([*args, "resume=true"]))
    skipped, seen, counts = reported(capsys.readouterr().err)
    assert (counts, seen) == (bad, ROWS)
    fault_record("bad data", sum(bad.values()), skipped)


def test_skipped_items_are_kept_in_report_json_and_metrics_csv(tmp_path, fault_record):
    bad, sources = write_csv(tmp_path / "data")
    report = train(load_config([*common(tmp_path, "csv"), "name=kept", "log_every=1", "epochs=2"]))
    kept = report["skipped_items"]
    assert {reason: count for reason, count in kept["total"].items() if count} == {r: 2 * n for r, n in bad.items()}
    assert [epoch["epoch"] for epoch in kept["epochs"]] == [0, 1]
    for epoch in kept["epochs"]:  # each epoch's own counts
        assert (epoch["seen"], epoch["skipped"], epoch["reasons"]) == (ROWS, sum(bad.values()), bad)
        assert epoch["processes"] == [{"skipped": sum(bad.values()), "seen": ROWS}]
    examples = [example for examples in kept["epochs"][0]["examples"].values() for example in examples]
    assert any(source in example for example in examples for source in sources)
    assert json.loads((tmp_path / "kept" / "report.json").read_text())["skipped_items"] == kept
    with (tmp_path / "kept" / "metrics.csv").open() as file:
        rows = list(csv.DictReader(file))
    assert {reason: int(rows[-1][f"skipped_{reason}"]) for reason in kept["total"]} == kept["total"]  # so far
    assert int(rows[0]["skipped_missing"]) <= int(rows[-1]["skipped_missing"])
    fault_record("bad data", sum(bad.values()), sum(kept["epochs"][0]["reasons"].values()))


def write_mostly_good_csv(root, rows: int, missing: int) -> None:
    """``rows`` rows, the first ``missing`` naming files that do not exist."""
    (root / "images").mkdir(parents=True)
    lines = [b"filepath\ttitle"]
    for number in range(rows):
        if number >= missing:
            (root / "images" / f"good{number}.png").write_bytes(good_png(number))
        lines.append(f"images/good{number}.png\tpattern {number}".encode())
    (root / "pairs.tsv").write_bytes(b"\n".join(lines) + b"\n")


def test_too_much_bad_data_stops_the_run_early_with_a_checkpoint(tmp_path, fault_record):
    """40 missing files in 200 rows (20%, the limit 10%): the run stops once 50 items were read, long before the
    epoch's end (25 steps), and its checkpoint continues it."""
    write_mostly_good_csv(tmp_path / "data", 200, 40)
    args = [*common(tmp_path, "csv"), "name=early", "max_skipped_fraction=0.1", "epochs=2"]
    with pytest.raises(SkipLimitExceeded, match=r"of the \d+ items read in epoch 0 were skipped") as stopped:
        train(load_config(args))
    checkpoint = latest_checkpoint(tmp_path / "early" / "checkpoints")
    assert checkpoint is not None and f"checkpointed in {checkpoint}" in str(stopped.value)
    step = read_manifest(checkpoint)["step"]
    seen = int(re.search(r"of the (\d+) items", str(stopped.value)).group(1))
    assert 50 <= seen < 200 and step < 25
    fault_record("bad data", 1, 1)


@pytest.mark.slow
def test_bad_data_on_one_process_stops_every_process_together_with_each_ones_share(tmp_path, fault_record):
    """Three processes, bad images only in the shard of process 1: every process refuses with the same message,
    which gives each process's share; a checkpoint is written first."""
    from training import torchrun_train

    root = tmp_path / "shards"
    root.mkdir()
    for shard in range(3):
        members = []
        for number in range(24):
            content = BAD_IMAGES["corrupt"] if shard == 1 and number % 2 else good_png(number)
            members += [(f"{shard}{number:03d}.png", content), (f"{shard}{number:03d}.txt", b"a pattern")]
        write_tar(root / f"shard-{shard}.tar", members)
    args = [
        *common(tmp_path, "webdataset"),
        f"data_dir={root}/shard-{{0..2}}.tar",
        "name=shared",
        "batch_size=6",
        "steps_per_epoch=12",
        "epochs=1",
        "samples_per_shard=24",
        "max_skipped_fraction=0.1",
    ]
    finished = torchrun_train(*args, processes=3, succeed=False, timeout=180)
    assert finished.returncode != 0
    refusals = re.findall(r"uncurated train: stopped: (.*)", finished.stderr)
    assert len(refusals) == 3 and len(set(refusals)) == 1, finished.stderr[-4000:]
    shares = re.search(
        r"per process: (\d+) of \d+ \(rank 0\), (\d+) of \d+ \(rank 1\), (\d+) of \d+ \(rank 2\)", finished.stderr
    )
    assert shares and shares.group(1) == shares.group(3) == "0" and int(shares.group(2)) > 0, finished.stderr[-4000:]
    assert "PeerLost" not in finished.stderr and "lost" not in finished.stderr
    assert latest_checkpoint(tmp_path / "shared" / "checkpoints") is not None
    fault_record("bad data", 1, 1)


def test_the_limit_applies_to_the_fraction_of_items_seen_once_fifty_were_read():
    from uncurated.data import REASONS
    from uncurated.train.distributed import Distributed
    from uncurated.train.skipped_items import MIN_ITEMS, SkippedItems

    def numbers(good: int, missing: int) -> list[float]:
        return [float(good), *(float(missing if reason == "missing" else 0) for reason in REASONS)]

    assert MIN_ITEMS == 50
    items = SkippedItems(0.22, Distributed())
    assert not items.agreed(numbers(160, 40))  # 20% of the items seen, not 25% of the good ones
    assert SkippedItems(0.19, Distributed()).agreed(numbers(160, 40))
    assert not items.agreed(numbers(0, 49))  # too few read yet
    assert items.agreed(numbers(0, 50))
    assert items.totals == {"good": 0, "missing": 50}
