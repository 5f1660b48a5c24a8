"""The ResNet on the CPU paths users have: oneDNN's AVX2 kernels (CPUs without AVX-512), one thread and the default.

Each case runs in a subprocess, because the fault it guards against is native: heap corruption in oneDNN's
channels_last backward of a stride-2 1 x 1 convolution with 2 to 7 input channels (PyTorch 2.13), which ends a
process with a segmentation fault, an abort or a bus error, or silently corrupts memory. The subprocess forces
oneDNN's AVX2 path with ``ONEDNN_MAX_CPU_ISA=AVX2`` (a no-op on a CPU that has no more), so a machine with
AVX-512 runs what a user's AVX2 CPU runs.
"""

import os
import subprocess
import sys
import textwrap

import pytest

# The narrow network of the tiny presets and of a user's own small ResNet, fed a channels_last batch.
NARROW_STEP = """
import torch
from uncurated.models.resnet import ResNet
torch.manual_seed(0)
for widths in [(2, 2), (4, 4, 8, 8), (6, 6, 12)]:
    for _ in range(3):
        model = ResNet(1, widths, (2,) * len(widths))
        images = torch.rand(64, 1, 28, 28).contiguous(memory_format=torch.channels_last)
        model(images).sum().backward()
print("ok")
"""

# The convolutions of a network kept channels_last must be as accurate as float32 allows, not merely not crash:
# each convolution's output and both gradients against float64's (which PyTorch computes with its own kernels, not
# oneDNN's), relative to the largest entry. Layer by layer, because a whole network's float32 gradient is no test
# of the kernels: a pre-activation within rounding of zero flips a ReLU and moves the gradient by far more.
CHANNELS_LAST_AGREES = """
import torch
from torch import nn
from uncurated.models.resnet import ResNet

def relative_error(got, reference):
    return float((got.double() - reference).abs().max() / reference.abs().max())

torch.manual_seed(0)
for in_channels, widths in [(1, (8, 12, 24)), (3, (16, 32, 64))]:
    model = ResNet(in_channels, widths, (1, 2, 1))
    assert model.memory_format == torch.channels_last
    for conv in (m for m in model.modules() if isinstance(m, nn.Conv2d)):
        images = torch.randn(16, conv.in_channels, 28, 28)
        results = []
        for dtype, memory_format in [(torch.float32, torch.channels_last), (torch.float64, torch.contiguous_format)]:
            layer = nn.Conv2d(conv.in_channels, conv.out_channels, conv.kernel_size, conv.stride, conv.padding,
                              bias=False).to(dtype).to(memory_format=memory_format)
            layer.weight.data.copy_(conv.weight.data)
            x = images.to(dtype).contiguous(memory_format=memory_format).detach().requires_grad_(True)
            y = layer(x)
            y.backward(torch.ones_like(y) / y.numel())
            results.append((y.detach(), x.grad, layer.weight.grad))
        for got, reference in zip(*results):
            assert relative_error(got, reference) < 1e-5, (conv, relative_error(got, reference))
print("ok")
"""


def run_on_avx2(script: str, threads: str | None) -> subprocess.CompletedProcess:
    env = dict(os.environ, ONEDNN_MAX_CPU_ISA="AVX2")
    env.pop("OMP_NUM_THREADS", None)
    if threads is not None:
        env["OMP_NUM_THREADS"] = threads
    return subprocess.run(
        [sys.executable, "-c", textwrap.dedent(script)], env=env, capture_output=True, text=True, timeout=240
    )


@pytest.mark.parametrize("threads", ["1", None], ids=["one-thread", "default-threads"])
def test_a_narrow_resnet_trains_on_the_avx2_path(threads):
    result = run_on_avx2(NARROW_STEP, threads)
    assert result.returncode == 0 and result.stdout.strip() == "ok", (result.returncode, result.stderr[-2000:])


@pytest.mark.parametrize("threads", ["1", None], ids=["one-thread", "default-threads"])
def test_a_channels_last_resnet_matches_the_contiguous_format_on_the_avx2_path(threads):
    result = run_on_avx2(CHANNELS_LAST_AGREES, threads)
    assert result.returncode == 0 and result.stdout.strip() == "ok", (result.returncode, result.stderr[-2000:])
