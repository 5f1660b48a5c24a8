"""Bad data in training: every bad sample of every kind is skipped, counted under its reason with its source,
reported at the end of the epoch (even across a kill), and too many stop the run naming the key."""

import io
import re

import numpy as np
import pytest
from imagefiles import BAD_IMAGES, encode, pattern, write_tar
from PIL import Image

from uncurated.data import SkipLimitExceeded
from uncurated.train import load_config, train
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
