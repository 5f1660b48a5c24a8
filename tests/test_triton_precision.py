"""The kernels' precision per feature type, against a float64 reference, under Triton's interpreter.

bfloat16 and float16 features are multiplied in their own type with float32 accumulation (the interpreter widens
bfloat16 operands, whose products are exact in float32, as a tensor core's are); float32 ones in IEEE or TF32 as
PyTorch's own setting says (the interpreter multiplies in IEEE either way, so only the choice is checked here).
The reference is the dense engine in float64 on the same (rounded) features.
"""

from __future__ import annotations

import os

import pytest
import torch
from threadpoolctl import threadpool_limits

from uncurated import objectives
from uncurated.objectives.tiled.kernels import configs, recorded_launches, support

pytest.importorskip("triton")
pytestmark = pytest.mark.skipif(
    not torch.cuda.is_available() and os.environ.get("TRITON_INTERPRET") != "1",
    reason="the kernels need CUDA or Triton's interpreter (TRITON_INTERPRET=1, set by tests/conftest.py)",
)

UNIT_ROUNDOFF = {torch.bfloat16: 2.0**-8, torch.float16: 2.0**-11}


@pytest.fixture(autouse=True)
def one_blas_thread():
    with threadpool_limits(1, user_api="blas"):
        yield


def rounded_features(batch: int, dim: int, dtype: torch.dtype, seed: int = 0) -> list[torch.Tensor]:
    generator = torch.Generator().manual_seed(seed)
    return [torch.nn.functional.normalize(torch.randn(batch, dim, generator=generator), dim=1).to(dtype) for _ in "ab"]


def gradients(objective, features: list[torch.Tensor], dtype: torch.dtype, loss_scale: float = 1.0):
    """The value and the features' gradients of ``objective`` on ``features`` cast to ``dtype``."""
    a, b = (f.detach().to(dtype).requires_grad_() for f in features)
    value = objective(a, b)
    grads = torch.autograd.grad(value * loss_scale, [a, b])
    return [value.detach().double(), *(g.double() / loss_scale for g in grads)]


def relative_errors(reference, got) -> list[float]:
    return [float((g - r).abs().max() / r.abs().max()) for r, g in zip(reference, got, strict=True)]


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
@pytest.mark.parametrize(("name", "pairing"), [("infonce", "cross"), ("siglip", "cross"), ("dcl", "two_view")])
def test_half_precision_matches_float64_at_the_types_rounding(name, pairing, dtype):
    """Value and gradients within a few units of the type's rounding of a float64 reference on the same features:
    products exact (accumulated in float32), ``dG`` and the stored gradient rounded once each to the type."""
    features = rounded_features(150, 48, dtype)
    reference = gradients(objectives.build(name, pairing=pairing, tiling="never"), features, torch.float64)
    kernels = objectives.build(name, pairing=pairing, tiling="triton", block_size=64)
    got = gradients(kernels, features, dtype)
    errors = relative_errors(reference, got)
    assert max(errors) < 4 * UNIT_ROUNDOFF[dtype], errors  # the normalized features, too, are in the type


def test_float16_gradient_keeps_entries_of_order_one_over_b_squared():
    """float16 ``dG`` entries at and below float16's smallest number are kept: the kernel scales each row of ``dG``
    by a power of two before the product. For a loss averaged over B anchors, ``dG``'s entries are about
    ``r L / (2 B^2)`` and ``dX``'s about ``r |y| L / (2 B)`` (r the inverse temperature, L a loss scale). At B =
    65,536, t = 0.07, d = 1,024 (``|y|`` ~ 0.03) and L = 32, that is 5e-8 and 1e-4: ``dG`` at float16's smallest
    subnormal (6e-8), ``dX`` just above its smallest normal (6.1e-5). B = 1,024, t = 1, d = 32 and L = 1/8 give
    the same, 6e-8 and 8e-5, and run in seconds here. Cast unscaled, ``dG`` made the gradient's error 6.0e-3 of
    its largest entry; scaled, 8.8e-4."""
    features = rounded_features(1024, 32, torch.float16, seed=1)
    build = {"pairing": "cross", "temperature": 1.0}
    reference = gradients(objectives.build("infonce", tiling="never", **build), features, torch.float64, 1 / 8)
    kernels = objectives.build("infonce", tiling="triton", block_size=256, **build)
    got = gradients(kernels, features, torch.float16, 1 / 8)
    errors = relative_errors(reference, got)
    assert max(errors[1:]) < 4 * UNIT_ROUNDOFF[torch.float16], errors


@pytest.mark.parametrize("dtype", [torch.bfloat16, torch.float16])
def test_half_precision_gradient_slice_by_slice_matches_float64(dtype):
    """At a GPU's block shapes, d = 200 (padded to 256) takes eight 32-column gradient slices, each added into
    float32 sums from the block's ``dG`` formed once, and rounded to the type at the end: as close to the float64
    reference as a gradient held whole."""
    config = configs.choose("cuda", 200, dtype, block_size=64, interpreter=False)
    blocks = config.blocks(200)
    assert (blocks.dim, blocks.gradient_depth) == (256, 32)
    features = rounded_features(100, 200, dtype)
    reference = gradients(objectives.build("infonce", pairing="cross", tiling="never"), features, torch.float64)
    kernels = objectives.build("infonce", pairing="cross", tiling="triton", block_size=64)
    with configs.launching(config):
        got = gradients(kernels, features, dtype)
    errors = relative_errors(reference, got)
    assert max(errors) < 4 * UNIT_ROUNDOFF[dtype], errors


def set_float32(setting: str) -> None:
    """Set PyTorch's float32 matrix products through one of its APIs, the older (``allow_tf32``,
    ``set_float32_matmul_precision``) or the current (``fp32_precision``, the matmul's or the global one)."""
    api, _, value = setting.partition("=")
    if api == "allow_tf32":
        torch.backends.cuda.matmul.allow_tf32 = value == "True"
    elif api == "set_float32_matmul_precision":
        torch.set_float32_matmul_precision(value)
    elif api == "matmul.fp32_precision":
        torch.backends.cuda.matmul.fp32_precision = value
    else:
        torch.backends.fp32_precision = value


@pytest.mark.parametrize(
    ("setting", "expected"),
    [
        ("set_float32_matmul_precision=highest", "ieee"),
        ("allow_tf32=True", "tf32"),
        ("set_float32_matmul_precision=high", "tf32"),
        ("set_float32_matmul_precision=medium", "tf32"),
        ("matmul.fp32_precision=tf32", "tf32"),
        ("matmul.fp32_precision=ieee", "ieee"),
        ("fp32_precision=tf32", "tf32"),
    ],
)
def test_float32_products_follow_pytorchs_tf32_setting(setting, expected, float32_setting):
    """TF32 set through either of PyTorch's APIs lets the kernels use it, as PyTorch's own products do; the default
    keeps IEEE float32. Once the current API is set, the older settings cannot be read back (PyTorch raises)."""
    set_float32(setting)
    a, b = (f.requires_grad_() for f in rounded_features(40, 16, torch.float32))
    with recorded_launches() as launches:
        objectives.build("infonce", tiling="triton", block_size=32)(a, b).backward()
    assert {launch.switches["shape.INPUT_PRECISION"] for launch in launches} == {expected}
    assert support.input_precision() == expected


def test_the_default_is_ieee(float32_setting):
    assert support.input_precision() == "ieee"


def test_an_unsupported_type_is_refused_not_widened():
    a, b = (torch.randn(8, 16, dtype=torch.float64) for _ in "ab")
    with pytest.raises(ValueError, match="takes float32, bfloat16, float16 features, got anchors of type float64"):
        objectives.build("infonce", tiling="triton")(a, b)
