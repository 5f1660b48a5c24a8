"""Turning the bytes of files and tar members into image tensors and captions, or a :class:`BadSample`.

The file-based datasets share these decoders so that a bad item is classified
the same way wherever it is met (see :data:`~uncurated.data.skip.REASONS`).
Images are decoded with Pillow, converted to ``"L"`` (one channel) or
``"RGB"`` (three) and optionally resized; pixel formats without a faithful
8-bit conversion (16- and 32-bit integer, float) are skipped as
``wrong_mode`` rather than clipped.
"""

from __future__ import annotations

import io
import os
from pathlib import Path

import numpy as np
import torch
from PIL import Image, UnidentifiedImageError
from torch import Tensor

from ..data_defaults import IMAGE_MODES as MODES
from ..data_defaults import RESIZES
from ..validation import check_choice, check_integer
from .skip import BadSample

#: Pillow modes that convert to ``L`` and ``RGB`` without loss of range.
EIGHT_BIT_MODES = frozenset(
    {"1", "L", "LA", "La", "P", "PA", "RGB", "RGBA", "RGBa", "RGBX", "CMYK", "YCbCr", "LAB", "HSV"}
)


def check_image_options(
    mode: str, size: int | tuple[int, int] | None, resize: str = "stretch"
) -> tuple[int, int] | None:
    """Check ``mode`` (one of :data:`MODES`), ``size`` (None, an int or (height, width) >= 1) and ``resize``
    (one of :data:`RESIZES`); return the size."""
    check_choice("mode", mode, MODES)
    check_choice("resize", resize, RESIZES)
    if size is None:
        return None
    if isinstance(size, int) and not isinstance(size, bool):
        size = (size, size)
    if not isinstance(size, (tuple, list)) or len(size) != 2:
        raise ValueError(f"size must be None, an integer >= 1 or a pair (height, width) of them, got {size!r}")
    return check_integer("size", size[0], 1), check_integer("size", size[1], 1)


def read_file(path: str | os.PathLike) -> bytes:
    """The bytes of ``path``; :class:`BadSample` ``missing`` or ``unreadable`` (also for an invalid path)."""
    try:
        return Path(path).read_bytes()
    except FileNotFoundError as error:
        raise BadSample("missing", "no such file") from error
    except OSError as error:
        raise BadSample("unreadable", error.strerror or type(error).__name__) from error
    except ValueError as error:  # a path the system cannot take, e.g. one holding a NUL byte
        raise BadSample("unreadable", f"invalid path: {error}") from error


def decode_image(
    data: bytes, mode: str = "RGB", size: tuple[int, int] | None = None, resize: str = "stretch"
) -> Tensor:
    """The image encoded in ``data`` as a float32 (C, H, W) tensor in [0, 1].

    Args:
        data: the encoded image (PNG, JPEG or any format Pillow reads).
        mode: ``"L"`` (C = 1) or ``"RGB"`` (C = 3).
        size: ``(height, width)`` to resize to, or ``None`` to keep the image's size.
        resize: one of :data:`RESIZES`: ``"stretch"`` (bilinear, the aspect ratio not
            kept) or ``"crop"`` (bicubic, the shorter side scaled to fit, the centre kept).

    Raises:
        BadSample: ``zero_byte``, ``truncated``, ``corrupt`` or ``wrong_mode``.
    """
    check_choice("resize", resize, RESIZES)
    if not data:
        raise BadSample("zero_byte", "empty file")
    try:
        with Image.open(io.BytesIO(data)) as image:
            image.load()
            if image.mode not in EIGHT_BIT_MODES:
                raise BadSample("wrong_mode", f"mode {image.mode!r} has no faithful 8-bit conversion")
            image = image.convert(mode)
            if size is not None and image.size != (size[1], size[0]):
                image = _resized(image, size, resize)
            pixels = np.asarray(image, dtype=np.uint8)
    except BadSample:
        raise
    except UnidentifiedImageError as error:
        raise BadSample("corrupt", "not an image Pillow can identify") from error
    except Exception as error:  # Pillow's decoders raise many exception types on damaged bytes
        reason = "truncated" if "truncated" in str(error).lower() else "corrupt"
        raise BadSample(reason, f"{type(error).__name__}: {error}") from error
    if pixels.ndim == 2:
        pixels = pixels[:, :, None]
    return torch.from_numpy(pixels.copy()).permute(2, 0, 1).float().div_(255)


def _resized(image: Image.Image, size: tuple[int, int], resize: str) -> Image.Image:
    height, width = size
    if resize == "stretch":
        return image.resize((width, height), Image.Resampling.BILINEAR)
    scale = max(height / image.height, width / image.width)
    scaled = (max(width, round(image.width * scale)), max(height, round(image.height * scale)))
    image = image.resize(scaled, Image.Resampling.BICUBIC)
    left, top = (scaled[0] - width) // 2, (scaled[1] - height) // 2
    return image.crop((left, top, left + width, top + height))


def decode_caption(data: bytes | str) -> str:
    """The caption in ``data`` (UTF-8 bytes, or text), stripped of surrounding whitespace.

    Text that holds lone surrogates (``errors="surrogateescape"`` decoding of
    bytes that are not UTF-8) counts as undecodable.

    Raises:
        BadSample: ``caption_encoding`` or ``empty_caption``.
    """
    try:
        text = data.decode("utf-8") if isinstance(data, bytes) else data
        text.encode("utf-8")
    except (UnicodeDecodeError, UnicodeEncodeError) as error:
        raise BadSample("caption_encoding", f"not UTF-8 at position {error.start}") from error
    text = text.strip()
    if not text:
        raise BadSample("empty_caption", "no text")
    return text
