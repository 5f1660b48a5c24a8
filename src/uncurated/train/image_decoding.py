"""How a run decodes image files: the side they are resized to and the resize rule, from the data and model keys.
Imports nothing of torch until it is called (the data formats' registrations import it, and ``--help`` them)."""

from __future__ import annotations

from typing import Any

from .setting import ConfigError


def image_size(config: Any) -> int | None:
    """The side images are resized to: ``image_size``, else an ``hf:`` backbone's input size, else each image's own
    (``config``: a :class:`~uncurated.train.config.TrainConfig`)."""
    from ..models.factory import split_source

    kind, source = split_source(config.image_encoder)
    if config.image_size or kind != "hf":
        return config.image_size or None
    from ..models.hf import image_preprocessing

    try:
        return image_preprocessing(source, config.image_encoder_config).size
    except ConfigError:
        raise
    except ValueError as error:
        raise ConfigError(str(error)) from error


def image_resize(config: Any) -> str:
    """``image_resize``; ``auto`` is ``crop`` for ``hf:`` and ``python:`` encoders (their preprocessing) and
    ``stretch`` for the built-in ones (whose data is square)."""
    from ..models.factory import split_source

    if config.image_resize != "auto":
        return config.image_resize
    return "stretch" if split_source(config.image_encoder)[0] == "builtin" else "crop"


def decoding(config: Any) -> dict[str, Any]:
    """How the files of a format decode their images: ``image_mode``, :func:`image_size`, :func:`image_resize`."""
    return {"mode": config.image_mode, "size": image_size(config), "resize": image_resize(config)}
