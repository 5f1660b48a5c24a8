"""The image-text arms of a preset compare objectives at one shared, fixed temperature: the preset's recipe names it,
so an objective other than the recipe's CLIP does not start from its own default (0.07 for most, SigLIP's learned
0.1) while CLIP trains at 0.2."""

import pytest

from uncurated.bench.presets import IMAGE_TEXT_TEMPERATURE, PRESETS, plan_runs
from uncurated.train.config import load_config

#: The arms that set their own temperature on purpose.
OWN_TEMPERATURE = {"dcl": 0.1}


@pytest.mark.parametrize("preset", ["tiny", "quick", "full", "gpu"])
def test_every_image_text_arm_trains_at_the_presets_fixed_temperature(preset):
    checked = 0
    for spec in plan_runs(PRESETS[preset]):
        if spec.arm.suite != "image_text":
            continue
        config = load_config(list(spec.arm.overrides))
        name, params = config.objective_spec()
        want = OWN_TEMPERATURE.get(spec.arm.objective_key, IMAGE_TEXT_TEMPERATURE)
        assert params.get("temperature") == want, (spec.name, params)
        assert params.get("learnable", False) is False, (spec.name, params)
        checked += 1
    assert checked >= 5


def test_the_shared_temperature_is_not_an_objectives_default():
    """Away from every objective's own default, so that a lost override shows."""
    assert IMAGE_TEXT_TEMPERATURE not in (0.07, 0.1, 0.5)
