"""The start of a run names whose default each changed objective parameter is: its paper's, or where the objective's
name is not that paper (simclr's t = 0.07 is CLIP's), the one it comes from."""

from __future__ import annotations

from uncurated.train import load_config
from uncurated.train.presets import paper_notes


def test_simclrs_temperature_note_names_clip_and_simclrs_own_values():
    (note,) = paper_notes(load_config(["preset=digits"]))  # NT-Xent at t = 0.5
    assert note == (
        "note: objective.temperature=0.5, not simclr's default 0.07 (CLIP's, Radford et al. 2021; SimCLR, "
        "Chen et al. 2020, used 0.5 on CIFAR-10, 0.1 on ImageNet)"
    )


def test_infonce_borrows_clips_temperature_and_clip_keeps_its_own():
    (infonce,) = paper_notes(load_config(["preset=digits", "objective=infonce", "objective.temperature=0.2"]))
    assert infonce.endswith("not infonce's default 0.07 (CLIP's, Radford et al. 2021)")
    clip = paper_notes(load_config(["preset=digits", "objective=clip", "objective.temperature=0.2"]))
    assert clip[0] == "note: objective.temperature=0.2, not clip's default 0.07 (its paper's)"


def test_a_parameter_at_its_default_gets_no_note():
    assert paper_notes(load_config(["preset=digits", "objective.temperature=0.07"])) == []
