import functools
import tarfile

import pytest
import torch
from imagefiles import BAD_IMAGES, encode, pattern, write_tar
from torch.utils.data import DataLoader

from uncurated.data import SkipLimitExceeded, SkipReport, WebDatasetShards, collate_samples, expand_shards


def sample_members(key, seed, caption=None):
    return [(f"{key}.jpg", encode(pattern(seed, channels=3), "JPEG")), (f"{key}.txt", (caption or f"c{seed}").encode())]


def write_shards(tmp_path, count=4, per_shard=3):
    """``count`` shards of ``per_shard`` good samples; sample p of shard s has caption c{10 s + p}."""
    for shard in range(count):
        members = []
        for position in range(per_shard):
            members += sample_members(f"dir/{shard:02d}{position:03d}", 10 * shard + position)
        write_tar(tmp_path / f"shard-{shard:02d}.tar", members)
    return str(tmp_path / f"shard-{{00..{count - 1:02d}}}.tar")


def read_all(dataset):
    return [sample for sample in dataset if sample is not None]


def test_expand_shards():
    assert expand_shards("a/{008..011}.tar") == ["a/008.tar", "a/009.tar", "a/010.tar", "a/011.tar"]
    assert expand_shards(["x-{0..1}-{0..1}", "y"]) == ["x-0-0", "x-0-1", "x-1-0", "x-1-1", "y"]
    with pytest.raises(ValueError, match="runs backwards"):
        expand_shards("{3..1}")


def test_samples_indices_and_captions(tmp_path):
    dataset = WebDatasetShards(write_shards(tmp_path), size=8, samples_per_shard=5)
    assert dataset.num_indices == 20
    samples = read_all(dataset)
    assert [s["index"] for s in samples] == [5 * shard + p for shard in range(4) for p in range(3)]
    assert [s["caption"] for s in samples] == [f"c{10 * shard + p}" for shard in range(4) for p in range(3)]
    assert all(s["image"].shape == (3, 8, 8) and s["label"] == -1 for s in samples)
    assert dataset.report.good == 12 and dataset.report.skipped == 0
    gray = read_all(WebDatasetShards(str(tmp_path / "shard-00.tar"), mode="L"))
    assert gray[0]["image"].shape == (1, 8, 8)


def test_shards_are_split_between_workers_without_overlap(tmp_path):
    dataset = WebDatasetShards(write_shards(tmp_path), size=8, samples_per_shard=3)
    collate = functools.partial(collate_samples, report=dataset.report)
    indices = []
    for batch in DataLoader(dataset, batch_size=2, num_workers=2, collate_fn=collate):
        indices += batch["index"].tolist()
    assert sorted(indices) == list(range(12))


def test_shards_are_split_between_ranks(tmp_path, monkeypatch):
    pattern_ = write_shards(tmp_path)
    monkeypatch.setenv("WORLD_SIZE", "2")
    seen = []
    for rank in (0, 1):
        monkeypatch.setenv("RANK", str(rank))
        seen.append({s["index"] for s in read_all(WebDatasetShards(pattern_, samples_per_shard=3))})
    assert seen[0] and seen[1] and not seen[0] & seen[1]
    assert seen[0] | seen[1] == set(range(12))


def test_shuffles_change_the_order_but_not_the_samples_or_indices(tmp_path):
    pattern_ = write_shards(tmp_path, count=6, per_shard=4)
    plain = [(s["index"], s["caption"]) for s in read_all(WebDatasetShards(pattern_, samples_per_shard=4))]
    dataset = WebDatasetShards(pattern_, samples_per_shard=4, shuffle_shards=True, shuffle_buffer=5, seed=1)
    epoch0 = [(s["index"], s["caption"]) for s in read_all(dataset)]
    assert epoch0 == [(s["index"], s["caption"]) for s in read_all(dataset)]  # reproducible
    dataset.set_epoch(1)
    epoch1 = [(s["index"], s["caption"]) for s in read_all(dataset)]
    assert sorted(epoch0) == sorted(epoch1) == sorted(plain)
    assert epoch0 != plain and epoch1 != epoch0


def test_the_shard_order_is_drawn_anew_each_epoch_from_the_seed_and_the_epoch(tmp_path):
    """shuffle_shards without a sample buffer: each epoch reads every shard once, whole, in an order drawn from
    (seed, epoch); another epoch, another order; the same epoch again, the same order; another seed, another."""
    dataset = WebDatasetShards(
        write_shards(tmp_path, count=8, per_shard=2), samples_per_shard=2, shuffle_shards=True, seed=3
    )
    orders = []
    for epoch in range(4):
        dataset.set_epoch(epoch)
        orders.append(dataset.reader_shards())
        shards_read = [s["index"] // 2 for s in read_all(dataset)][::2]
        assert shards_read == orders[-1]
    assert all(sorted(order) == list(range(8)) for order in orders)
    assert len({tuple(order) for order in orders}) == 4, orders
    dataset.set_epoch(2)
    assert dataset.reader_shards() == orders[2]
    other = WebDatasetShards(
        write_shards(tmp_path, count=8, per_shard=2), samples_per_shard=2, shuffle_shards=True, seed=4
    )
    other.set_epoch(2)
    assert other.reader_shards() != orders[2]


def test_bad_samples_are_skipped_per_reason_and_keep_positions(tmp_path):
    members = sample_members("k0", 0)
    members += [("k1.png", BAD_IMAGES["corrupt"]), ("k1.txt", b"a caption")]
    members += [("k2.jpg", BAD_IMAGES["truncated"]), ("k2.txt", b"a caption")]
    members += [("k3.jpg", encode(pattern(3), "JPEG")), ("k3.txt", b"caf\xe9")]
    members += [("k4.jpg", encode(pattern(4), "JPEG")), ("k4.txt", b"  \n")]
    members += [("k5.jpg", encode(pattern(5), "JPEG"))]  # no caption
    members += [("k6.txt", b"no image")]
    members += [("k7.png", BAD_IMAGES["zero_byte"]), ("k7.txt", b"x")]
    members += sample_members("k8", 8)
    write_tar(tmp_path / "s.tar", members)
    dataset = WebDatasetShards(str(tmp_path / "s.tar"), samples_per_shard=10, report=SkipReport(max_fraction=1.0))
    items = list(dataset)
    assert len(items) == 9
    assert [s["index"] for s in items if s is not None] == [0, 8]
    expected = {"corrupt": 1, "truncated": 1, "caption_encoding": 1, "empty_caption": 1, "missing": 2, "zero_byte": 1}
    assert dict(dataset.report.counts) == expected
    assert dataset.report.examples["caption_encoding"][0].source.endswith("s.tar:k3")


def test_corrupt_and_missing_shards_are_recorded_and_earlier_samples_kept(tmp_path):
    write_shards(tmp_path, count=1, per_shard=4)
    data = (tmp_path / "shard-00.tar").read_bytes()
    (tmp_path / "truncated.tar").write_bytes(data[: len(data) // 2])
    with tarfile.open(tmp_path / "shard-00.tar") as tar:
        header = tar.getmembers()[4].offset  # the third sample's first header
    damaged = bytearray(data)
    damaged[header : header + 512] = b"\xff" * 512  # tarfile alone would take this for the end, quietly
    (tmp_path / "damaged.tar").write_bytes(bytes(damaged))
    (tmp_path / "garbage.tar").write_bytes(b"\x01" * 4096)
    shards = [str(tmp_path / name) for name in ("truncated.tar", "damaged.tar", "garbage.tar", "absent.tar")]
    dataset = WebDatasetShards(shards, samples_per_shard=4, report=SkipReport(max_fraction=1.0))
    samples = read_all(dataset)
    assert samples and all(s["index"] < 8 for s in samples)  # only from the first two shards
    assert [s["index"] for s in samples if s["index"] >= 4] == [4]  # lost: the sample being read, and the tail
    assert dict(dataset.report.counts) == {"corrupt_shard": 3, "missing": 1}
    sources = [skip.source for skip in dataset.report.examples["corrupt_shard"]]
    assert sources == shards[:3]


def test_a_corrupt_shard_counts_against_the_threshold(tmp_path):
    (tmp_path / "garbage.tar").write_bytes(b"\x01" * 4096)
    dataset = WebDatasetShards(str(tmp_path / "garbage.tar"), report=SkipReport(max_fraction=0.5, min_items=1))
    with pytest.raises(SkipLimitExceeded, match="corrupt_shard"):
        list(dataset)


def test_a_shard_longer_than_samples_per_shard_raises(tmp_path):
    dataset = WebDatasetShards(write_shards(tmp_path, count=1, per_shard=3), samples_per_shard=2)
    with pytest.raises(ValueError, match="samples_per_shard must be at least"):
        list(dataset)


def test_gzip_compressed_shards(tmp_path):
    import gzip

    write_shards(tmp_path, count=1, per_shard=2)
    compressed = tmp_path / "shard.tar.gz"
    compressed.write_bytes(gzip.compress((tmp_path / "shard-00.tar").read_bytes()))
    assert [s["caption"] for s in read_all(WebDatasetShards(str(compressed)))] == ["c0", "c1"]
    assert torch.is_tensor(read_all(WebDatasetShards(str(compressed)))[0]["image"])


def same_samples(first, second):
    return len(first) == len(second) and all(
        a is None
        and b is None
        or (a["index"], a["caption"]) == (b["index"], b["caption"])
        and torch.equal(a["image"], b["image"])
        for a, b in zip(first, second, strict=True)
    )


def test_the_webdataset_library_reader_yields_the_same_samples_and_skips(tmp_path):
    pytest.importorskip("webdataset")
    shards = write_shards(tmp_path, count=3, per_shard=4)
    members = sample_members("k0", 0) + [("k1.png", BAD_IMAGES["corrupt"]), ("k1.txt", b"x")]
    members += [("k2.txt", b"no image")] + sample_members("k3", 3)
    write_tar(tmp_path / "bad.tar", members)
    sources = [*expand_shards(shards), str(tmp_path / "bad.tar"), str(tmp_path / "absent.tar")]
    read = {
        reader: WebDatasetShards(
            sources, samples_per_shard=4, reader=reader, size=8, shuffle_buffer=3, report=SkipReport(max_fraction=1.0)
        )
        for reader in ("tarfile", "webdataset")
    }
    items = {reader: list(dataset) for reader, dataset in read.items()}
    assert len(items["tarfile"]) == 16 and same_samples(items["tarfile"], items["webdataset"])
    assert read["tarfile"].report.counts == read["webdataset"].report.counts == {"corrupt": 1, "missing": 2}
    with pytest.raises(ValueError, match=r"reader must be one of 'tarfile', 'webdataset'"):
        WebDatasetShards(shards, reader="pipe")


def test_the_library_reader_ends_a_shard_damaged_in_the_middle_quietly(tmp_path):
    """Why tarfile stays the default: the library keeps tarfile's quiet end at a damaged header."""
    pytest.importorskip("webdataset")
    write_shards(tmp_path, count=1, per_shard=4)
    data = bytearray((tmp_path / "shard-00.tar").read_bytes())
    with tarfile.open(tmp_path / "shard-00.tar") as tar:
        header = tar.getmembers()[4].offset
    data[header : header + 512] = b"\xff" * 512
    (tmp_path / "damaged.tar").write_bytes(bytes(data))
    counts = {}
    for reader in ("tarfile", "webdataset"):
        dataset = WebDatasetShards(
            str(tmp_path / "damaged.tar"), samples_per_shard=4, reader=reader, report=SkipReport(max_fraction=1.0)
        )
        counts[reader] = (len(read_all(dataset)), dict(dataset.report.counts))
    # The default reader records the damage (and loses the sample it was completing); the library keeps that
    # sample but loses the last two without a word.
    assert counts == {"tarfile": (1, {"corrupt_shard": 1}), "webdataset": (2, {})}
