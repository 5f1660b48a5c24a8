"""The states of the process's random generators as plain values a checkpoint can hold, and back.

A resumed run draws the same augmentations and batches as an uninterrupted
one only if every generator continues where it stopped: PyTorch's (CPU and
the process's CUDA device), NumPy's global one and Python's ``random``. Their native
states are a uint8 tensor (PyTorch) and tuples holding an array (NumPy) or
ints (Python); :func:`capture` turns them into tensors, ints, floats, strings,
lists and dicts (what :mod:`uncurated.train.state_codec` writes), exactly:

* ``torch``: the CPU generator's state, a uint8 tensor;
* ``cuda``: the generator state of the process's current CUDA device, as a
  list of one uint8 tensor (empty where CUDA is not initialized: nothing has
  drawn there). One device, not all: a training process uses one, and asking
  every device for its state would start a CUDA context on each GPU from each
  process;
* ``numpy``: ``{"algorithm": "MT19937", "key": [624 ints], "position": int,
  "has_gauss": int, "cached_gaussian": float}``, the five fields of
  ``numpy.random.get_state()``;
* ``python``: ``{"version": int, "internal": [625 ints], "gauss_next": float
  or None}``, the three fields of ``random.getstate()``.

:func:`restore` sets every generator from such a dictionary.

These generators are the process's own. Under ``torchrun`` each process
draws its augmentations and dropout masks from them, so they must differ
between processes: the trainer seeds them from :func:`process_seed`, a
function of the run's seed, the process's rank and the step (see
:class:`~uncurated.train.trainer.Trainer`). What every process must draw
alike has its own seeded generator instead: the data's order (from the seed
and the epoch), WPSE's random features (the module's generator), the
partners of ``positives=label`` (drawn for the whole batch from the seed and
the step, each process taking its rows').

The data loaders draw from neither: each epoch's ``DataLoader`` of a process
takes :func:`loader_generator` of the run's seed, its rank and the epoch, so
that starting an iteration (which draws the loader workers' base seed) leaves
the process's generators as they were, and a run resumed mid-epoch starts the
epoch's loader exactly as the uninterrupted run did. PyTorch seeds loader
worker ``k`` from that base seed plus ``k``: the workers' seeds are distinct
per rank, worker and epoch.
"""

from __future__ import annotations

import random
from typing import Any

import numpy as np
import torch


def seed_everything(seed: int) -> None:
    """Seed the process's generators (Python's, NumPy's, PyTorch's) from ``seed`` alone, as every process does
    before it builds the model, so that the initial weights are drawn alike everywhere."""
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


def process_seed(seed: int, rank: int, step: int = 0) -> int:
    """The seed of the generators of process ``rank`` starting to draw at ``step`` in a run seeded with ``seed``:
    the first 32-bit word of NumPy's ``SeedSequence([seed, rank, step])``. 32 bits are all that torch's CPU
    generator and NumPy's global one read of a seed."""
    return int(np.random.SeedSequence([seed, rank, step]).generate_state(1)[0])


def loader_seed(seed: int, rank: int, epoch: int) -> int:
    """The seed of process ``rank``'s data loader in ``epoch`` of a run seeded with ``seed``: the first 64-bit
    word of NumPy's ``SeedSequence([seed, rank, epoch], spawn_key=(1,))``, a stream apart from
    :func:`process_seed`'s (whose entropy is the same kind of triple)."""
    return int(np.random.SeedSequence([seed, rank, epoch], spawn_key=(1,)).generate_state(1, np.uint64)[0])


def loader_generator(seed: int, rank: int, epoch: int) -> torch.Generator:
    """A CPU generator seeded with :func:`loader_seed`, for a ``DataLoader``'s ``generator=``."""
    return torch.Generator().manual_seed(loader_seed(seed, rank, epoch))


def capture() -> dict[str, Any]:
    """The current state of every generator, as described in the module."""
    return {
        "torch": torch.get_rng_state(),
        "cuda": [torch.cuda.get_rng_state()] if torch.cuda.is_available() and torch.cuda.is_initialized() else [],
        "numpy": numpy_fields(_numpy_legacy_state()),
        "python": python_fields(random.getstate()),
    }


def _numpy_legacy_state() -> tuple:
    """numpy's global generator as its legacy MT19937 tuple (a dict only if someone swapped its bit generator)."""
    state = np.random.get_state(legacy=True)
    if not isinstance(state, tuple):
        raise RuntimeError(f"numpy's global generator is not MT19937 ({state['bit_generator']}): it cannot be saved")
    return state


def numpy_fields(state: tuple) -> dict[str, Any]:
    """The tuple of ``numpy.random.get_state()`` as the dictionary described in the module."""
    algorithm, key, position, has_gauss, cached_gaussian = state
    return {
        "algorithm": str(algorithm),
        "key": [int(word) for word in key],
        "position": int(position),
        "has_gauss": int(has_gauss),
        "cached_gaussian": float(cached_gaussian),
    }


def python_fields(state: tuple) -> dict[str, Any]:
    """The tuple of ``random.getstate()`` as the dictionary described in the module."""
    version, internal, gauss_next = state
    return {"version": int(version), "internal": [int(word) for word in internal], "gauss_next": gauss_next}


def restore(state: dict[str, Any]) -> None:
    """Set every generator to ``state``, a dictionary made by :func:`capture`.

    The saved CUDA state goes to the current CUDA device (the first of the list, which a checkpoint of an
    older version held for every device); where CUDA is not available it is left unused.
    """
    torch.set_rng_state(state["torch"])
    if state["cuda"] and torch.cuda.is_available():
        torch.cuda.set_rng_state(state["cuda"][0])
    numpy = state["numpy"]
    np.random.set_state(
        (
            numpy["algorithm"],
            np.array(numpy["key"], dtype=np.uint32),
            numpy["position"],
            numpy["has_gauss"],
            numpy["cached_gaussian"],
        )
    )
    python = state["python"]
    random.setstate((python["version"], tuple(python["internal"]), python["gauss_next"]))
