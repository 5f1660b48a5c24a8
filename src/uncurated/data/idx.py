"""Reading and writing IDX files, the array format of MNIST and Fashion-MNIST.

An IDX file is a 4-byte magic number, one big-endian ``uint32`` size per
dimension, then the array's values in big-endian C order. The magic number is
two zero bytes, a type code (:data:`TYPE_CODES`) and the number of dimensions.
Files are often distributed gzip-compressed; :func:`read_idx` recognises gzip
data by its content and :func:`write_idx` compresses when the name ends in
``.gz``.
"""

from __future__ import annotations

import gzip
import os
import struct
import zlib
from pathlib import Path

import numpy as np

#: The IDX type code of each element type, as a big-endian NumPy dtype.
TYPE_CODES: dict[int, np.dtype] = {
    0x08: np.dtype(">u1"),
    0x09: np.dtype(">i1"),
    0x0B: np.dtype(">i2"),
    0x0C: np.dtype(">i4"),
    0x0D: np.dtype(">f4"),
    0x0E: np.dtype(">f8"),
}

_GZIP_MAGIC = b"\x1f\x8b"
_MAX_SIZE = 2**32 - 1
_MAX_DIMS = 255


def read_idx(path: str | os.PathLike) -> np.ndarray:
    """The array stored in the IDX file ``path``, gzip-compressed or not, in native byte order.

    Raises ``FileNotFoundError`` if the file is missing and ``ValueError``,
    naming the file, if it is not a well-formed IDX file: a bad magic number,
    an unknown type code, a corrupt gzip stream, or a payload whose size does
    not match the header.
    """
    path = Path(path)
    data = path.read_bytes()
    if data.startswith(_GZIP_MAGIC):
        try:
            data = gzip.decompress(data)
        except (EOFError, OSError, zlib.error) as error:
            raise ValueError(f"{path}: corrupt gzip data ({error})") from error
    if len(data) < 4:
        raise ValueError(f"{path}: truncated header: expected at least 4 bytes, got {len(data)}")
    zero, code, ndim = struct.unpack(">HBB", data[:4])
    if zero != 0:
        raise ValueError(f"{path}: bad magic number 0x{data[:4].hex()}: IDX files start with two zero bytes")
    if code not in TYPE_CODES:
        accepted = ", ".join(f"0x{known:02X}" for known in TYPE_CODES)
        raise ValueError(f"{path}: unknown IDX type code 0x{code:02X}; accepted: {accepted}")
    header_size = 4 + 4 * ndim
    if len(data) < header_size:
        raise ValueError(
            f"{path}: truncated header: expected {header_size} bytes for {ndim} dimensions, got {len(data)}"
        )
    shape = struct.unpack(f">{ndim}I", data[4:header_size])
    dtype = TYPE_CODES[code]
    expected = int(np.prod(shape, dtype=np.int64)) * dtype.itemsize
    payload = len(data) - header_size
    if payload != expected:
        problem = "truncated" if payload < expected else "trailing data"
        raise ValueError(
            f"{path}: {problem}: the header's shape {shape} of {dtype.name} needs {expected} data bytes, got {payload}"
        )
    array = np.frombuffer(data, dtype=dtype, offset=header_size).reshape(shape)
    return array.astype(dtype.newbyteorder("="))


def write_idx(path: str | os.PathLike, array) -> None:
    """Write ``array`` to ``path`` as an IDX file, gzip-compressed if the name ends in ``.gz``.

    ``array`` is anything :func:`numpy.asarray` accepts, of one of the element
    types of :data:`TYPE_CODES` (uint8, int8, int16, int32, float32, float64),
    with at most 255 dimensions of at most ``2**32 - 1`` elements each.
    """
    path = Path(path)
    array = np.asarray(array)
    codes = {dtype.newbyteorder("="): code for code, dtype in TYPE_CODES.items()}
    native = array.dtype.newbyteorder("=")
    if native not in codes:
        accepted = ", ".join(dtype.name for dtype in codes)
        raise ValueError(f"array dtype must be one of {accepted} for IDX, got {array.dtype}")
    if array.ndim > _MAX_DIMS:
        raise ValueError(f"array must have at most {_MAX_DIMS} dimensions for IDX, got {array.ndim}")
    if any(size > _MAX_SIZE for size in array.shape):
        raise ValueError(f"array dimensions must be at most {_MAX_SIZE} for IDX, got shape {array.shape}")
    code = codes[native]
    header = struct.pack(f">HBB{array.ndim}I", 0, code, array.ndim, *array.shape)
    data = header + np.ascontiguousarray(array, dtype=TYPE_CODES[code]).tobytes()
    if path.name.endswith(".gz"):
        data = gzip.compress(data, mtime=0)
    path.write_bytes(data)
