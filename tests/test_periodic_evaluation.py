"""``eval_every``: evaluation while a run trains, kept by epoch in metrics.csv and report.json, without changing
what the run trains; under torchrun as in one process."""

from __future__ import annotations

import json

import pytest
import torch
from training import final_weights, overrides, torchrun_train

from uncurated.train import ConfigError, load_config, train
from uncurated.train.metrics import read_metrics
from uncurated.train.periodic_evaluation import headline_numbers
from uncurated.train.trainer import Trainer

#: Two epochs of 4 steps: digits' 256-image subset at batch 64 (the MLP has batch norm: eval mode would show).
TWO_EPOCHS = ["epochs=2", "train_subset=256", "batch_size=64", "probe_baselines=false", "eval_every=1"]


def evaluation_rows(run_dir) -> list[dict[str, str]]:
    return [row for row in read_metrics(run_dir / "metrics.csv") if row["eval_linear_probe_accuracy"]]


def test_eval_every_epoch_records_an_evaluation_per_epoch(tmp_path):
    report = train(load_config(overrides(tmp_path, *TWO_EPOCHS, "name=along")))
    run_dir = tmp_path / "along"
    rows = evaluation_rows(run_dir)
    assert [(row["epoch"], row["step"]) for row in rows] == [("1.0", "4"), ("2.0", "8")]
    assert all(row["loss"] == "" for row in rows)  # an evaluation's row, not a step's
    assert [row["epoch"] for row in report["evaluations"]] == [1.0, 2.0]
    first, last = report["evaluations"]
    assert 0.5 < first["eval_linear_probe_accuracy"] <= 1 and "eval_knn_accuracy" in first
    # The end's evaluation is the report's own.
    assert last["eval_linear_probe_accuracy"] == report["evaluation"]["linear_probe"]["accuracy"]
    assert json.loads((run_dir / "report.json").read_text())["evaluations"] == report["evaluations"]
    assert (run_dir / "curves.png").is_file()


def test_evaluating_along_the_way_trains_the_same_weights(tmp_path):
    train(load_config(overrides(tmp_path, *TWO_EPOCHS, "name=along")))
    train(load_config(overrides(tmp_path, *TWO_EPOCHS[:-1], "name=plain")))
    along, plain = final_weights(tmp_path / "along"), final_weights(tmp_path / "plain")
    for name in plain:
        torch.testing.assert_close(along[name], plain[name], rtol=0, atol=0, msg=name)
    assert not any(key.startswith("eval_") for key in read_metrics(tmp_path / "plain" / "metrics.csv")[0])


def test_a_killed_run_resumed_keeps_its_earlier_evaluations_once(tmp_path, monkeypatch):
    original = Trainer.step
    calls = {"count": 0}

    def dying_step(self, batch):
        calls["count"] += 1
        if calls["count"] == 6:  # in the second epoch, after the first's evaluation and checkpoint
            raise KeyboardInterrupt("killed")
        return original(self, batch)

    monkeypatch.setattr(Trainer, "step", dying_step)
    with pytest.raises(KeyboardInterrupt):
        train(load_config(overrides(tmp_path, *TWO_EPOCHS, "name=cut")))
    monkeypatch.setattr(Trainer, "step", original)
    report = train(load_config(overrides(tmp_path, *TWO_EPOCHS, "name=cut", "resume=true")))
    assert [row["epoch"] for row in report["evaluations"]] == [1.0, 2.0]


def test_eval_every_with_nothing_to_evaluate_on_is_refused(tmp_path):
    from test_train_build import write_image_text_files

    _, csv_path, _ = write_image_text_files(tmp_path / "data")
    files = ["dataset=csv", f"data_dir={csv_path}", "image_size=8", "batch_size=16", "epochs=1", "eval_every=1"]
    with pytest.raises(ConfigError, match=r"eval_every=1: dataset=csv has no test split .* zero_shot_dir=FOLDER"):
        train(load_config(overrides(tmp_path, *files, "name=blind")))


def test_eval_every_is_checked_at_load():
    with pytest.raises(ConfigError, match=r"eval_every must be in \[0, inf\], got -1"):
        load_config(["eval_every=-1"])


def test_headline_numbers_are_the_accuracies_and_recalls():
    results = {
        "linear_probe": {"accuracy": 0.9, "train_images": 100, "per_class": [0.5]},
        "retrieval": {"image_to_text_r1": 0.3, "text_to_image_r10": 0.7},
        "knn": {"accuracy": 0.8, "k": 20, "temperature": 0.07},
        "zero_shot": {"top5_accuracy": None},
    }
    assert headline_numbers(results) == {
        "eval_linear_probe_accuracy": 0.9,
        "eval_retrieval_image_to_text_r1": 0.3,
        "eval_retrieval_text_to_image_r10": 0.7,
        "eval_knn_accuracy": 0.8,
    }


@pytest.mark.slow  # two runs, one of them under torchrun: about 80 s on 2 loaded cores
def test_two_processes_evaluate_as_one(tmp_path):
    exact = ["augment=none", "norm=none", "projection_layers=1"]
    train(load_config(overrides(tmp_path, *TWO_EPOCHS, *exact, "name=one")))
    torchrun_train(*overrides(tmp_path, *TWO_EPOCHS, *exact, "name=two"))
    one, two = evaluation_rows(tmp_path / "one"), evaluation_rows(tmp_path / "two")
    assert [row["epoch"] for row in two] == ["1.0", "2.0"]
    for expected, got in zip(one, two, strict=True):
        assert float(got["eval_linear_probe_accuracy"]) == pytest.approx(
            float(expected["eval_linear_probe_accuracy"]), abs=0.02
        )


def test_every_n_epochs_means_epochs_n_2n_and_puts_the_model_back_into_training(tmp_path):
    from uncurated.train.metrics import MetricsLog
    from uncurated.train.periodic_evaluation import PeriodicEvaluation

    model = torch.nn.BatchNorm1d(2)
    measured = []

    def measure():
        model.eval()  # as the evaluation does
        measured.append(torch.rand(()).item())  # draws from the global generator
        return {"knn": {"accuracy": 0.5}}

    log = MetricsLog(tmp_path / "metrics.csv", ["step", "epoch", "loss"])
    every_two = PeriodicEvaluation(2, measure, model, say=lambda message: None)
    torch.manual_seed(0)
    for epoch in range(1, 6):
        every_two(float(epoch), 10 * epoch, log)
    assert [row["epoch"] for row in read_metrics(tmp_path / "metrics.csv")] == ["2.0", "4.0"]
    assert measured[0] == measured[1]  # the generators are put back after each evaluation
    assert model.training
