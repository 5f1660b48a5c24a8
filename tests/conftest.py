import functools
import os

import pytest
import torch

# The fused Triton kernels (tests/test_triton_kernels.py, and the every-engine cases of tests/test_tiled.py) run on
# CPU tensors under Triton's interpreter, which triton selects when a kernel is defined, from TRITON_INTERPRET. It is
# set here, before any test imports a kernel module, and only where no CUDA device is present (there the kernels run
# compiled); nothing else in the suite uses triton.
if not torch.cuda.is_available():
    os.environ.setdefault("TRITON_INTERPRET", "1")


@pytest.fixture(autouse=True)
def _seeded():
    """Every test starts from the same random state."""
    torch.manual_seed(0)


@pytest.fixture
def fast_probe(monkeypatch):
    """Linear probes with C fixed at 1, for tests about training or the bench rather than the probe's search."""
    from uncurated.evaluate import suite
    from uncurated.train import evaluation

    for module in (suite, evaluation):
        monkeypatch.setattr(module, "linear_probe", functools.partial(module.linear_probe, C=1.0))


@pytest.fixture
def one_thread():
    """One torch thread: the tiny models gain nothing from more, and on shared cores threads only contend."""
    threads = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(threads)


@pytest.fixture
def float32_setting():
    """PyTorch's float32 matrix-product setting, restored after the test through its current API (the older one
    cannot be read once the current one was set)."""
    matmul, overall = torch.backends.cuda.matmul.fp32_precision, torch.backends.fp32_precision
    yield
    torch.backends.cuda.matmul.fp32_precision = matmul
    torch.backends.fp32_precision = overall
