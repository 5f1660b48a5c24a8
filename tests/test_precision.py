"""The precision contract (products in the features' type, statistics and state in float32)."""

import copy

import pytest
import torch
from torch.utils._python_dispatch import TorchDispatchMode

from uncurated import objectives
from uncurated.precision import BFLOAT16_GRADIENT_BOUND, bfloat16_loss_bound

B, D = 384, 48
PRODUCTS = {torch.ops.aten.mm.default, torch.ops.aten.addmm.default, torch.ops.aten.bmm.default}


class ProductTypes(TorchDispatchMode):
    """Records the input types of the matrix products of features run under it (an operand with a side of ``D``;
    the shared exponentials' sums over a tile, vector-matrix products of statistics, stay in float32)."""

    def __init__(self):
        super().__init__()
        self.types = set()

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        tensors = [arg for arg in args if isinstance(arg, torch.Tensor)]
        if func in PRODUCTS and any(D in tensor.shape for tensor in tensors):
            self.types |= {tensor.dtype for tensor in tensors}
        return func(*args, **(kwargs or {}))


def build(name, tiling):
    params = {"tiling": tiling, **({"block_size": 100} if tiling == "always" else {})}
    if objectives.OBJECTIVES[name].defaults().get("num_samples"):
        params["num_samples"] = B
    if name == "nuclr":
        params["freeze_epochs"] = 0
    return objectives.build(name, **params)


def run(objective, a, b):
    a, b = a.detach().requires_grad_(), b.detach().requires_grad_()
    if isinstance(objective, objectives.StatefulObjective):
        objective.set_epoch(0.0)
        objective.begin_step()
        loss = objective(a, b, index=torch.arange(B))
    else:
        loss = objective(a, b)
    loss.backward()
    return loss, a.grad, b.grad


@pytest.mark.parametrize("tiling", ["never", "always"])
@pytest.mark.parametrize("name", list(objectives.OBJECTIVES))
def test_bfloat16_features_give_float32_statistics_within_the_stated_bounds(name, tiling):
    generator = torch.Generator().manual_seed(0)
    a = torch.randn(B, D, generator=generator, dtype=torch.float64)
    b = a + 0.8 * torch.randn(B, D, generator=generator, dtype=torch.float64)
    a, b = a.bfloat16(), b.bfloat16()  # the reference sees the same (representable) features
    objective = build(name, tiling)
    reference = run(copy.deepcopy(objective).double(), a.double(), b.double())
    with ProductTypes() as products:
        loss, grad_a, grad_b = run(objective, a, b)
    assert products.types == {torch.bfloat16}
    assert loss.dtype == torch.float32 and grad_a.dtype == grad_b.dtype == torch.bfloat16
    loss = loss.detach()
    assert abs(float(loss) - float(reference[0].detach())) <= bfloat16_loss_bound(name) * max(
        1.0, abs(float(reference[0].detach()))
    )
    for got, expected in zip((grad_a, grad_b), reference[1:], strict=True):
        assert float((got.double() - expected).norm() / expected.norm()) <= BFLOAT16_GRADIENT_BOUND
    if isinstance(objective, objectives.StatefulObjective):
        assert {tensor.dtype for tensor in objective.state.tensors.values()} == {torch.float32}
