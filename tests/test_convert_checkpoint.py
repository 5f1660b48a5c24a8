"""scripts/convert_checkpoint.py: a trusted first-format checkpoint becomes a current one with the same state;
without --trusted nothing happens, and a payload is refused even with it."""

import json
import runpy
from pathlib import Path

import numpy as np
import pytest
import torch
from faultutils import OBJECTIVES, TWO_VIEW, assert_identical, train_here

from uncurated.data import SkipCounts
from uncurated.train.checkpoint import (
    LEGACY_STATE,
    MANIFEST,
    STATE,
    CheckpointError,
    read_objective_states,
    read_training_state,
)
from uncurated.train.restore import load_run

SCRIPT = Path(__file__).resolve().parents[1] / "scripts" / "convert_checkpoint.py"
RUN = [*TWO_VIEW, *OBJECTIVES["sogclr"], "epochs=0.2", "name=run"]


def convert(*args: str) -> None:
    runpy.run_path(str(SCRIPT))["main"](list(args))


def to_first_format(folder: Path, state: dict) -> dict:
    """Rewrite ``folder`` as the first format wrote it: the state pickled in state.pt, the objective's state in
    it, with NumPy's and Python's generator states as tuples, the skip counts as an object, and a manifest
    without a format. Returns the training state with the objective's, as the converted folder holds it."""
    (own,) = state["ranks"]
    numpy, python = own["rng"]["numpy"], own["rng"]["python"]
    state = {**state, "objective": read_objective_states(folder)[0]}
    old = {
        **{key: value for key, value in state.items() if key != "ranks"},
        "epoch_skips": SkipCounts.from_state_dict(own["epoch_skips"]),
        "rng": {
            **own["rng"],
            "numpy": (
                numpy["algorithm"],
                np.array(numpy["key"], dtype=np.uint32),
                numpy["position"],
                numpy["has_gauss"],
                numpy["cached_gaussian"],
            ),
            "python": (python["version"], tuple(python["internal"]), python["gauss_next"]),
        },
    }
    torch.save(old, folder / LEGACY_STATE)
    manifest = json.loads((folder / MANIFEST).read_text())
    for name in [STATE, *(name for name in manifest["files"] if name.startswith("objective-"))]:
        (folder / name).unlink()
        del manifest["files"][name]
    del manifest["format"], manifest["processes"]
    (folder / MANIFEST).write_text(json.dumps(manifest))
    return state


def test_a_trusted_first_format_run_is_converted_to_the_same_state_and_resumes(tmp_path, capsys):
    train_here([*RUN, f"out={tmp_path}"])
    folder = tmp_path / "run" / "checkpoints" / "step-00000002"
    state = read_training_state(folder)
    assert state["ranks"][0]["epoch_skips"] is not None
    state = to_first_format(folder, state)
    with pytest.raises(CheckpointError, match="written by an older uncurated"):
        load_run(tmp_path / "run")
    with pytest.raises(SystemExit) as stop:
        convert(str(tmp_path / "run"))
    assert stop.value.code == 2 and "give --trusted" in capsys.readouterr().err
    assert (folder / LEGACY_STATE).exists()

    convert("--trusted", str(tmp_path / "run"))
    assert not (folder / LEGACY_STATE).exists()
    assert_identical(state, read_training_state(folder))
    assert load_run(tmp_path / "run").checkpoint == folder
    train_here([*RUN, f"out={tmp_path}", "resume=true"])  # every entry of the state is restored


def test_a_payload_is_refused_even_when_trusted(tmp_path, capsys):
    folder = tmp_path / "step-00000001"
    folder.mkdir()
    marker = tmp_path / "marker"

    class Payload:
        def __reduce__(self):
            return open, (str(marker), "w")

    torch.save({"payload": Payload()}, folder / LEGACY_STATE)
    with pytest.raises(SystemExit) as stop:
        convert("--trusted", str(folder))
    assert stop.value.code == 1 and f"{folder}: not converted" in capsys.readouterr().err
    assert not marker.exists() and not (folder / STATE).exists()
