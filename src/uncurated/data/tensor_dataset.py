"""Images held in memory as one tensor, with labels and optional captions, and a batched fast path."""

from __future__ import annotations

from collections.abc import Sequence

import torch
from torch import Tensor
from torch.utils.data import Dataset

from .base import Sample


class TensorImageDataset(Dataset):
    """A map-style dataset over in-memory images; the index of a sample is its position.

    Args:
        images: (N, C, H, W), uint8 (0..255) or floating point with values in
            [0, 1]. uint8 images stay uint8 in memory and are scaled per batch.
        labels: (N,) integer classes, or ``None`` for unlabelled data (-1).
        captions: N strings, or ``None`` for image-only data.
        classes: the class names, indexed by label, when known.

    ``dataset[i]`` is a :class:`~uncurated.data.base.Sample`; :meth:`batch`
    returns a whole batch at once, on the device the tensors live on (see
    :meth:`to`), which is how the training loop should read these datasets.
    """

    def __init__(
        self,
        images: Tensor,
        labels: Tensor | None = None,
        captions: Sequence[str] | None = None,
        *,
        classes: Sequence[str] | None = None,
    ) -> None:
        if not isinstance(images, Tensor) or images.ndim != 4:
            shape = tuple(images.shape) if isinstance(images, Tensor) else type(images).__name__
            raise ValueError(f"images must be a tensor of shape (N, C, H, W), got {shape}")
        if images.dtype != torch.uint8:
            if not images.is_floating_point():
                raise ValueError(f"images must be uint8 or floating point, got {images.dtype}")
            if images.numel() and not bool(((images >= 0) & (images <= 1)).all()):
                raise ValueError("floating-point images must have values in [0, 1] (NaN is not accepted)")
        count = len(images)
        if labels is None:
            labels = torch.full((count,), -1, dtype=torch.long)
        if not isinstance(labels, Tensor) or labels.shape != (count,) or labels.is_floating_point():
            raise ValueError(f"labels must be an integer tensor of shape ({count},), got {labels!r:.80}")
        if captions is not None:
            captions = list(captions)
            if len(captions) != count or not all(isinstance(caption, str) for caption in captions):
                raise ValueError(f"captions must be a sequence of {count} strings (one per image)")
        self.images = images
        self.labels = labels.long()
        self.captions = captions
        self.classes = None if classes is None else tuple(classes)

    def __len__(self) -> int:
        return len(self.images)

    def __getitem__(self, index: int) -> Sample:
        index = int(index)
        if not -len(self) <= index < len(self):
            raise IndexError(f"index {index} is out of range for a dataset of {len(self)} samples")
        index %= len(self)
        sample = Sample(index=index, image=_as_float(self.images[index]), label=int(self.labels[index]))
        if self.captions is not None:
            sample["caption"] = self.captions[index]
        return sample

    def batch(self, indices: Tensor) -> dict:
        """The samples at ``indices`` (a 1-D integer tensor), batched.

        Returns a dict with ``index`` and ``label`` (LongTensors), ``image``
        (B, C, H, W) float32 in [0, 1], all on the dataset's device, and
        ``caption`` (a list of B strings) for image-text data.
        """
        if not isinstance(indices, Tensor) or indices.ndim != 1 or indices.is_floating_point():
            raise ValueError(f"indices must be a 1-D integer tensor, got {indices!r:.80}")
        indices = indices.to(self.images.device, torch.long)
        if indices.numel() and not bool(((indices >= 0) & (indices < len(self))).all()):
            raise ValueError(
                f"indices must be in [0, {len(self)}), got values from {int(indices.min())} to {int(indices.max())}"
            )
        batch: dict[str, Tensor | list[str]] = {
            "index": indices,
            "image": _as_float(self.images[indices]),
            "label": self.labels[indices],
        }
        if self.captions is not None:
            batch["caption"] = [self.captions[i] for i in indices.tolist()]
        return batch

    def to(self, device: torch.device | str) -> TensorImageDataset:
        """Move the tensors to ``device`` (e.g. the training GPU) and return the dataset."""
        for name, value in vars(self).items():
            if isinstance(value, Tensor):
                setattr(self, name, value.to(device))
        return self

    @property
    def device(self) -> torch.device:
        """Where the images are."""
        return self.images.device

    def __repr__(self) -> str:
        kind = "image-text" if self.captions is not None else "image"
        return f"{type(self).__name__}({len(self)} {kind} samples of shape {tuple(self.images.shape[1:])})"


def _as_float(images: Tensor) -> Tensor:
    """uint8 images scaled to float32 in [0, 1]; floating-point images as float32."""
    if images.dtype == torch.uint8:
        return images.float().div_(255)
    return images.float()
