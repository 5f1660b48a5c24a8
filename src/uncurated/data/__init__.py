"""Datasets read from local files: the IDX format and Fashion-MNIST."""

from .fashion_mnist import CLASS_NAMES, DEFAULT_ROOT, load_fashion_mnist
from .idx import read_idx, write_idx

__all__ = ["CLASS_NAMES", "DEFAULT_ROOT", "load_fashion_mnist", "read_idx", "write_idx"]
