"""A whole run: a short one learns and reports, a killed one resumed ends like an uninterrupted one."""

import pytest
import torch
from training import final_weights, overrides

from uncurated.train import ConfigError, load_config, train
from uncurated.train.checkpoint import latest_checkpoint, read_objective_states, read_training_state
from uncurated.train.trainer import Trainer


def test_a_short_run_learns_and_writes_its_report(tmp_path):
    # 16-dimensional features: random ones lose much of digits' information, learned ones keep it.
    narrow = ["widths=[128, 16]", "probe_train_size=1000"]
    report = train(load_config(overrides(tmp_path, *narrow, "epochs=20", "name=learn")))
    run_dir = tmp_path / "learn"
    for name in ("config.yaml", "metrics.csv", "curves.png", "report.json"):
        assert (run_dir / name).is_file(), name
    probe = report["evaluation"]["linear_probe"]
    assert probe["accuracy"] > probe["untrained_accuracy"] + 0.08
    assert probe["accuracy"] > 0.88


@pytest.mark.parametrize("objective", ["dcl", "nuclr"])
def test_a_killed_run_resumed_ends_like_an_uninterrupted_one(tmp_path, monkeypatch, objective):
    common = ["epochs=2", "checkpoint_every=5", f"objective={objective}"]
    if objective == "nuclr":
        common += ["objective.freeze_epochs=0.5", "objective.temperature=0.2"]
    train(load_config(overrides(tmp_path, *common, "name=whole")))

    original = Trainer.step
    calls = {"count": 0}

    def dying_step(self, batch):
        calls["count"] += 1
        if calls["count"] == 13:  # after the checkpoints of step 10 and of the first epoch's end (11), before 15
            raise KeyboardInterrupt("killed")
        return original(self, batch)

    monkeypatch.setattr(Trainer, "step", dying_step)
    with pytest.raises(KeyboardInterrupt):
        train(load_config(overrides(tmp_path, *common, "name=killed")))
    monkeypatch.setattr(Trainer, "step", original)
    assert latest_checkpoint(tmp_path / "killed" / "checkpoints").name == "step-00000011"
    with pytest.raises(ConfigError, match="pass resume=true"):
        train(load_config(overrides(tmp_path, *common, "name=killed")))
    train(load_config(overrides(tmp_path, *common, "name=killed", "resume=true")))

    whole, resumed = final_weights(tmp_path / "whole"), final_weights(tmp_path / "killed")
    assert whole.keys() == resumed.keys()
    for name in whole:
        torch.testing.assert_close(resumed[name], whole[name], rtol=0, atol=0, msg=name)
    folders = [latest_checkpoint(tmp_path / run / "checkpoints") for run in ("whole", "killed")]
    states = [{**read_training_state(folder), "objective": read_objective_states(folder)[0]} for folder in folders]
    assert states[0]["position"] == states[1]["position"]
    assert states[0]["objective"].keys() == states[1]["objective"].keys()
    for key, value in states[0]["objective"].items():
        if isinstance(value, torch.Tensor):
            assert torch.equal(value, states[1]["objective"][key]), key
        else:
            for name, tensor in value["tensors"].items():
                assert torch.equal(tensor, states[1]["objective"][key]["tensors"][name]), name
            assert value["scalars"] == states[1]["objective"][key]["scalars"]
    rows = (tmp_path / "killed" / "metrics.csv").read_text().splitlines()
    assert len(rows) == 1 + states[0]["position"]["step"]  # no step logged twice
