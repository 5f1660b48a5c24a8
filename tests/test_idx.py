import gzip
import struct

import numpy as np
import pytest

from uncurated.data import read_idx, write_idx

DTYPES = [np.uint8, np.int8, np.int16, np.int32, np.float32, np.float64]


def extreme_values(dtype, shape):
    """Values spanning the dtype's range, so that a byte-order mistake cannot go unnoticed."""
    count = int(np.prod(shape))
    if np.issubdtype(dtype, np.integer):
        info = np.iinfo(dtype)
        values = np.linspace(info.min, info.max, count).round()
    else:
        values = np.linspace(-1e30, 1e30, count) if dtype == np.float64 else np.linspace(-3e4, 3e4, count)
        values[0] = np.finfo(dtype).tiny
    return values.astype(dtype).reshape(shape)


@pytest.mark.parametrize("dtype", DTYPES)
@pytest.mark.parametrize("name", ["array-idx3-ubyte", "array-idx3-ubyte.gz"])
@pytest.mark.parametrize("shape", [(7,), (3, 4, 5)])
def test_round_trip(tmp_path, dtype, name, shape):
    array = extreme_values(dtype, shape)
    path = tmp_path / name
    write_idx(path, array)
    loaded = read_idx(path)
    assert loaded.dtype == np.dtype(dtype)
    assert loaded.shape == shape
    np.testing.assert_array_equal(loaded, array)
    assert loaded.flags.writeable


def test_gz_name_compresses_and_plain_name_does_not(tmp_path):
    array = np.arange(6, dtype=np.uint8).reshape(2, 3)
    write_idx(tmp_path / "a.gz", array)
    write_idx(tmp_path / "a", array)
    header = b"\x00\x00\x08\x02" + struct.pack(">II", 2, 3)
    assert (tmp_path / "a").read_bytes() == header + bytes(range(6))
    assert gzip.decompress((tmp_path / "a.gz").read_bytes()) == header + bytes(range(6))


def test_reads_big_endian_data_written_by_hand(tmp_path):
    path = tmp_path / "hand-made"
    path.write_bytes(b"\x00\x00\x0b\x01" + struct.pack(">I", 3) + struct.pack(">3h", -2, 258, 32767))
    np.testing.assert_array_equal(read_idx(path), np.array([-2, 258, 32767], dtype=np.int16))


def test_gzip_is_recognised_by_content_not_name(tmp_path):
    array = np.arange(5, dtype=np.int32)
    write_idx(tmp_path / "data.gz", array)
    renamed = tmp_path / "data-without-suffix"
    (tmp_path / "data.gz").rename(renamed)
    np.testing.assert_array_equal(read_idx(renamed), array)


@pytest.mark.parametrize("compressed", [False, True])
def test_truncated_payload_names_file_and_sizes(tmp_path, compressed):
    raw = b"\x00\x00\x08\x02" + struct.pack(">II", 4, 5) + bytes(17)
    path = tmp_path / ("short.gz" if compressed else "short")
    path.write_bytes(gzip.compress(raw) if compressed else raw)
    with pytest.raises(ValueError, match=r"short.*truncated.*20 data bytes, got 17"):
        read_idx(path)


def test_trailing_bytes_are_rejected(tmp_path):
    path = tmp_path / "long"
    path.write_bytes(b"\x00\x00\x08\x01" + struct.pack(">I", 2) + bytes(3))
    with pytest.raises(ValueError, match=r"long.*trailing data.*2 data bytes, got 3"):
        read_idx(path)


@pytest.mark.parametrize("content", [b"", b"\x00\x00", b"\x00\x00\x08\x03" + bytes(8)])
def test_truncated_header_names_file(tmp_path, content):
    path = tmp_path / "stub"
    path.write_bytes(content)
    with pytest.raises(ValueError, match=r"stub.*truncated header"):
        read_idx(path)


def test_bad_magic_names_file(tmp_path):
    path = tmp_path / "not-idx.bin"
    path.write_bytes(b"\x01\x00\x08\x01" + struct.pack(">I", 1) + b"\x07")
    with pytest.raises(ValueError, match=r"not-idx\.bin.*bad magic"):
        read_idx(path)


def test_unknown_type_code_names_file_and_accepted_codes(tmp_path):
    path = tmp_path / "odd-type"
    path.write_bytes(b"\x00\x00\x0a\x01" + struct.pack(">I", 1) + b"\x07")
    with pytest.raises(ValueError, match=r"odd-type.*type code 0x0A.*0x08.*0x0E"):
        read_idx(path)


def test_corrupt_gzip_names_file(tmp_path):
    path = tmp_path / "broken.gz"
    path.write_bytes(gzip.compress(b"\x00\x00\x08\x01" + struct.pack(">I", 100) + bytes(100))[:20])
    with pytest.raises(ValueError, match=r"broken\.gz.*corrupt gzip"):
        read_idx(path)


def test_missing_file_raises_file_not_found(tmp_path):
    with pytest.raises(FileNotFoundError):
        read_idx(tmp_path / "absent")


@pytest.mark.parametrize("dtype", [np.int64, np.bool_, np.float16])
def test_write_rejects_types_idx_cannot_hold(tmp_path, dtype):
    with pytest.raises(ValueError, match=r"dtype must be one of uint8, int8, int16, int32, float32, float64"):
        write_idx(tmp_path / "x", np.zeros(3, dtype=dtype))
    assert not (tmp_path / "x").exists()
