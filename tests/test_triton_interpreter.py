"""Triton's interpreter takes a loop bound from a kernel argument whatever the triton and NumPy it runs on.

triton 3.6's interpreter turns a bound into an index with ``int(data)`` on a one-element array, which NumPy refuses
since 2.4; the refusal is reproduced here whatever NumPy is installed, so the repair is tested under any pair.
"""

from __future__ import annotations

import os

import pytest
import torch

triton = pytest.importorskip("triton")
pytestmark = pytest.mark.skipif(
    os.environ.get("TRITON_INTERPRET") != "1", reason="Triton's interpreter (TRITON_INTERPRET=1, tests/conftest.py)"
)

import triton.language as tl  # noqa: E402
from triton.runtime import interpreter  # noqa: E402

from uncurated.objectives.tiled.kernels.interpreter import repair_loop_bounds  # noqa: E402

MESSAGE = "only 0-dimensional arrays can be converted to Python scalars"


@triton.jit
def steps_kernel(out, n, STEP: tl.constexpr):
    """How many steps of ``STEP`` cover ``n``, counted by a loop bounded by the argument ``n``."""
    count = 0
    for _ in range(0, n, STEP):
        count += 1
    tl.store(out, count)


def steps(n: int, step: int) -> int:
    out = torch.zeros(1, dtype=torch.int32)
    steps_kernel[(1,)](out, n, STEP=step)
    return int(out.item())


def refused_index(tensor):
    """triton 3.6's ``__index__`` under a NumPy that refuses a one-element array as a scalar."""
    data = tensor.handle.data
    if data.ndim:
        raise TypeError(MESSAGE)
    return int(data)


@pytest.fixture
def refusing_interpreter(monkeypatch):
    """The interpreter as triton 3.6 lays it out with NumPy 2.4: its tensors' ``__index__`` refuses."""
    original = interpreter._patch_lang_tensor

    def patch_tensor(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", refused_index)

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", patch_tensor)


def test_a_refusing_interpreter_fails_the_loop_as_reported(refusing_interpreter):
    with pytest.raises(Exception, match=MESSAGE):
        steps(100, 16)


def test_the_repaired_interpreter_runs_a_loop_bounded_by_an_argument(refusing_interpreter):
    assert repair_loop_bounds()
    assert steps(100, 16) == 7
    assert steps(96, 32) == 3
    assert not repair_loop_bounds(), "repaired once: a second call has nothing to repair"


def test_an_interpreter_that_takes_the_bound_is_left_alone(monkeypatch):
    original = interpreter._patch_lang_tensor

    def accepting(tensor, scope):
        original(tensor, scope)
        scope.set_attr(tensor, "__index__", lambda self: int(self.handle.data.squeeze()))

    monkeypatch.setattr(interpreter, "_patch_lang_tensor", accepting)
    assert not repair_loop_bounds()
    assert interpreter._patch_lang_tensor is accepting
    assert steps(100, 16) == 7
