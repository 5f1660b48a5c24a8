"""Two processes sharing each batch (torchrun, gloo), checked by value against one process or an exact invariant:
the gather's gradient, the averaged loss, NUCLR's per-epoch xi (the authors' rule) and an index beyond one side's
samples. One torchrun runs every check (``distributed_values.py``)."""

from pathlib import Path

import pytest
import torch
from distributed_values import (
    COUNTS,
    XI_EPOCHS,
    XI_OPTIONS,
    authors_xi_run,
    gather_inputs,
    infonce_inputs,
    rows,
)
from launch import torchrun

from uncurated.objectives import InfoNCE

WORLD = len(COUNTS)


@pytest.fixture(scope="module")
def per_rank(tmp_path_factory) -> list[dict]:
    folder = tmp_path_factory.mktemp("values")
    torchrun(str(Path(__file__).with_name("distributed_values.py")), str(folder), processes=WORLD)
    return [torch.load(folder / f"rank{rank}.pt", weights_only=True) for rank in range(WORLD)]


def test_the_gather_hands_each_process_the_gradient_of_every_process_loss(per_rank):
    """Process r's loss |X M_r|^2 + <V_r, X_r> reads the whole batch X through the gather: the gradient of its
    rows X_r is that of the sum of every process's loss, as one process computes it on X."""
    inputs = gather_inputs()
    x = inputs["x"].clone().requires_grad_(True)
    total = sum((x @ inputs["m"][rank]).square().sum() for rank in range(WORLD)) + (inputs["v"] * x).sum()
    (expected,) = torch.autograd.grad(total, x)
    for rank, results in enumerate(per_rank):
        torch.testing.assert_close(results["gather_gradient"], expected[rows(rank, COUNTS)], rtol=1e-12, atol=1e-12)


def test_an_objective_gradient_through_the_gather_is_one_process_gradient_times_the_processes(per_rank):
    """Each process's CLIP loss weighs its pairs so that the processes' losses add up to W times the whole batch's:
    each process's feature gradient is W times one process's on the whole batch, at its rows."""
    a, b = (x.clone().requires_grad_(True) for x in infonce_inputs())
    expected = torch.autograd.grad(InfoNCE(0.3)(a, b) * WORLD, (a, b))
    for rank, results in enumerate(per_rank):
        for got, want in zip(results["infonce_gradient"], expected, strict=True):
            torch.testing.assert_close(got, want[rows(rank, COUNTS)], rtol=1e-10, atol=1e-12)


def test_average_is_the_mean_over_the_processes(per_rank):
    """Process r averages (r + 1, 10 (r + 1), -r): the mean over two processes is (1.5, 15, -0.5) on each."""
    for results in per_rank:
        torch.testing.assert_close(results["average"], torch.tensor([1.5, 15.0, -0.5], dtype=torch.float64))


def test_the_authors_xi_at_an_epoch_boundary_is_the_largest_popularity_of_every_process(per_rank):
    """At each new whole epoch xi = max(xi_0, max_j zeta_j) over the whole side, whose rows two processes hold:
    equal to the maximum of their rows put together, and to one process's xi, at every step."""
    alone = authors_xi_run()
    boundaries = 0
    for step, epoch in enumerate(XI_EPOCHS):
        records = [results["authors_xi"][step] for results in per_rank]
        for side in "ab":
            zeta = torch.cat([values for _, values in sorted(record[side] for record in records)])
            torch.testing.assert_close(zeta, alone[step][side][1], rtol=1e-10, atol=1e-12)
            for record in records:
                assert record["xi"][f"xi_{side}"] == pytest.approx(alone[step]["xi"][f"xi_{side}"], rel=1e-10)
            if step and int(epoch) > int(XI_EPOCHS[step - 1]):
                boundaries += 1
                expected = max(XI_OPTIONS["xi_init"], float(zeta.max()))
                # Above xi_0, and each process's maximum nonzero: their sum would differ from their maximum.
                assert expected > XI_OPTIONS["xi_init"] and all(float(record[side][1].max()) for record in records)
                for record in records:
                    assert record["xi"][f"xi_{side}"] == pytest.approx(expected, rel=1e-12), (side, epoch)
        assert records[0]["loss"] == pytest.approx(alone[step]["loss"], rel=1e-10)
    assert boundaries == 2 * 2  # two boundaries, two sides


def test_an_index_beyond_one_side_of_a_shared_index_is_refused_on_every_process(per_rank):
    """Sides of 9 and 5 samples, one index for both: process 1's 7 is a sample of side a but none of side b."""
    message = (
        "rank 1 of 2: ValueError: index must be in [0, 5) on side 'b' (its num_samples given at construction), "
        "got 7 (raised on every process, nothing was written)"
    )
    for results in per_rank:
        outcome = results["index_beyond_side_b"]
        assert outcome["raised"] == message
        assert outcome["unchanged"]
