import math

import pytest
import torch

from uncurated import objectives
from uncurated.demo import (
    COMMON_PARAMETERS,
    MAX_SHIFT,
    NOISE_STD,
    PAIRINGS,
    augment,
    format_objective_table,
    objective_table,
)


@pytest.fixture(scope="module")
def images():
    return torch.randint(0, 256, (12, 28, 28), generator=torch.Generator().manual_seed(1), dtype=torch.uint8)


def test_one_row_per_objective_with_finite_results(images):
    rows = objective_table(images, batch_size=8, dim=6)
    assert [row.name for row in rows] == [spec.name for spec in objectives.available()]
    for row in rows:
        assert set(row.results) == set(PAIRINGS)
        for result in row.results.values():
            assert math.isfinite(result.loss)
            assert math.isfinite(result.grad_norm) and result.grad_norm > 0


def test_shown_parameters_are_temperature_a_summed_reduction_and_the_objectives_own(images):
    rows = {row.name: row for row in objective_table(images, batch_size=4, dim=3)}
    assert rows["infonce"].parameters == {"temperature": 0.07}
    assert rows["hcl"].parameters["beta"] == 1.0
    assert rows["clip_reg"].parameters["direction_reduction"] == "sum"
    for name, row in rows.items():
        assert "temperature" in row.parameters
        hidden = set(COMMON_PARAMETERS) - {"temperature", "direction_reduction"}
        assert not set(row.parameters) & hidden
        assert ("direction_reduction" in row.parameters) == (name == "clip_reg")


def test_same_seed_same_table_other_seed_other_table(images):
    first = objective_table(images, batch_size=8, dim=6, seed=3)
    assert first == objective_table(images, batch_size=8, dim=6, seed=3)
    assert first != objective_table(images, batch_size=8, dim=6, seed=4)


def test_uint8_and_unit_float_images_agree(images):
    as_float = images.float() / 255
    assert objective_table(images, batch_size=6, dim=4) == objective_table(as_float, batch_size=6, dim=4)


def test_augment_is_a_shift_and_maybe_a_flip_plus_small_noise():
    generator = torch.Generator().manual_seed(0)
    images = torch.rand(32, 10, 12, generator=generator)
    views = augment(images, generator)
    assert views.shape == images.shape
    padded = torch.nn.functional.pad(images, (MAX_SHIFT,) * 4)
    span = 2 * MAX_SHIFT + 1
    crops = [padded[:, top : top + 10, left : left + 12] for top in range(span) for left in range(span)]
    candidates = torch.stack(crops + [crop.flip(-1) for crop in crops])  # (2 * span**2, 32, 10, 12)
    error = (candidates - views).abs().amax(dim=(2, 3)).min(dim=0)
    assert bool((error.values < 6 * NOISE_STD).all())
    assert len(set(error.indices.tolist())) > 10  # the shifts and flips vary between images


@pytest.mark.parametrize(
    ("kwargs", "message"),
    [
        ({"batch_size": 1}, r"batch_size must be in \[2, 12\], got 1"),
        ({"batch_size": 13}, r"batch_size must be in \[2, 12\], got 13"),
        ({"batch_size": 4.0}, r"batch_size must be an integer, got 4\.0"),
        ({"batch_size": 4, "dim": 0}, r"dim must be in \[1, inf\], got 0"),
    ],
)
def test_bad_sizes_are_rejected(images, kwargs, message):
    with pytest.raises(ValueError, match=message):
        objective_table(images, **kwargs)


def test_images_must_be_a_batch_of_2d_images(images):
    with pytest.raises(ValueError, match=r"images must be a tensor of shape \(N, H, W\), got shape \(12, 784\)"):
        objective_table(images.flatten(1))


def test_table_is_aligned_and_marks_default_pairings(images):
    rows = objective_table(images, batch_size=8, dim=6)
    lines = format_objective_table(rows).splitlines()
    body = lines[2:]
    assert len(body) == len(rows)
    assert len({len(line) for line in body}) == 1
    for row, line in zip(rows, body, strict=True):
        assert line.startswith(row.name)
        default = f"{row.results[row.default_pairing].loss:.4f}*"
        assert line.count("*") == 1 and default in line
