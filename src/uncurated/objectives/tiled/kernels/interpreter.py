"""Triton's CPU interpreter, made to take a loop bound from a kernel argument with the NumPy it runs on.

Under the interpreter a kernel's integer argument is a one-element NumPy
array, and ``range(0, n, step)`` over it asks the array for its
``__index__``. Triton 3.6's interpreter answers ``int(data)``, which NumPy
deprecated in 1.25 and now refuses ("only 0-dimensional arrays can be
converted to Python scalars", NumPy 2.4.6); triton 3.8 and 3.9 squeeze the
array first. :func:`repair_loop_bounds` gives an interpreter that refuses the
later one's ``__index__``, and leaves one that takes the bound as it is. The
compiled kernels never run this code: their loops are compiled, not
interpreted.
"""

from __future__ import annotations

import operator
from types import SimpleNamespace
from typing import Any

import numpy as np
from triton.runtime import interpreter


def repair_loop_bounds() -> bool:
    """Give the interpreter's tensors an ``__index__`` that takes a one-element array, where theirs refuses it;
    whether it was repaired (False: nothing to repair, or an interpreter this cannot read)."""
    patch_tensor = getattr(interpreter, "_patch_lang_tensor", None)
    if patch_tensor is None or not hasattr(interpreter, "_LangPatchScope") or _indexes_one_element(patch_tensor):
        return False

    def patched(tensor, scope) -> None:
        patch_tensor(tensor, scope)
        scope.set_attr(tensor, "__index__", _squeezed_index)

    interpreter._patch_lang_tensor = patched
    return True


def _squeezed_index(tensor) -> int:
    return int(tensor.handle.data.squeeze())


def _indexes_one_element(patch_tensor) -> bool:
    """Whether a tensor class patched by ``patch_tensor`` takes a one-element array as an index (True, too, where
    the probe itself fails: an interpreter laid out otherwise is left alone)."""

    class Probe:
        handle = SimpleNamespace(data=np.array([1], dtype=np.int32))

    scope = interpreter._LangPatchScope()
    probe: Any = Probe()
    try:
        patch_tensor(Probe, scope)
        operator.index(probe)
    except TypeError as error:
        return "0-dimensional" not in str(error)
    finally:
        scope.restore()
    return True
