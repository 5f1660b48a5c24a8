"""``report_to``: the trackers a run writes to are the ones asked for, a missing one is refused before anything is
written, and W&B runs offline; W&B and TensorBoard stand-ins where they are not installed."""

from __future__ import annotations

import sys
import types

import pytest
from training import overrides

from uncurated.cli import main
from uncurated.train import ConfigError, load_config, train
from uncurated.train.config import RESUMABLE_CHANGES, TrainConfig, resume_conflicts
from uncurated.train.metrics import MetricsLog
from uncurated.train.trackers import check_trackers, open_trackers, tracker_names

TINY = ["epochs=1", "train_subset=128", "batch_size=64", "probe_baselines=false", "checkpoint_each_epoch=false"]


class FakeWandb(types.ModuleType):
    """``wandb`` as far as a run uses it: ``init`` records its arguments and returns a run that records its rows."""

    def __init__(self) -> None:
        super().__init__("wandb")
        self.inits: list[dict] = []
        self.rows: list[tuple[dict, int]] = []
        self.finished = 0

    def init(self, **arguments):
        self.inits.append(arguments)
        fake = self

        class Run:
            def log(self, values, step):
                fake.rows.append((dict(values), step))

            def finish(self):
                fake.finished += 1

        return Run()


class FakeTensorBoard(types.ModuleType):
    """``torch.utils.tensorboard``: a ``SummaryWriter`` that records its folder, purge step and scalars."""

    def __init__(self) -> None:
        super().__init__("torch.utils.tensorboard")
        self.writers: list[dict] = []
        fake = self

        class SummaryWriter:
            def __init__(self, log_dir, purge_step=None):
                self.record = {"log_dir": log_dir, "purge_step": purge_step, "scalars": [], "closed": False}
                fake.writers.append(self.record)

            def add_scalar(self, key, value, step):
                self.record["scalars"].append((key, value, step))

            def flush(self):
                pass

            def close(self):
                self.record["closed"] = True

        self.SummaryWriter = SummaryWriter


@pytest.fixture
def fake_wandb(monkeypatch):
    module = FakeWandb()
    monkeypatch.setitem(sys.modules, "wandb", module)
    return module


@pytest.fixture
def fake_tensorboard(monkeypatch):
    module = FakeTensorBoard()
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", module)
    return module


def test_report_to_names_trackers_and_refuses_anything_else():
    assert tracker_names("none") == ()
    assert tracker_names("tensorboard, wandb") == ("tensorboard", "wandb")
    assert TrainConfig().report_to == "none"
    for bad, message in [
        ("tensorbord", r"report_to: 'tensorbord' is not a tracker; give one or more of none, tensorboard, wandb"),
        ("wandb,wandb", r"report_to=wandb,wandb names a tracker twice"),
        ("none,wandb", r"report_to=none,wandb: none means no tracker"),
        ("", r"report_to: '' is not a tracker"),
    ]:
        with pytest.raises(ConfigError, match=message):
            load_config([f"report_to={bad}"])


def test_a_tracker_that_is_not_installed_is_refused_before_anything_is_written(monkeypatch, tmp_path, capsys):
    monkeypatch.setitem(sys.modules, "wandb", None)  # import fails as if wandb were not installed
    with pytest.raises(SystemExit) as stop:
        main(["train", *overrides(tmp_path, "report_to=tensorboard,wandb", "name=refused")])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert "report_to=" in error and "pip install 'uncurated[" in error and "Traceback" not in error
    assert not (tmp_path / "refused").exists()


def test_check_trackers_names_the_extra_of_each_tracker(monkeypatch):
    monkeypatch.setitem(sys.modules, "wandb", None)
    monkeypatch.setitem(sys.modules, "torch.utils.tensorboard", None)
    with pytest.raises(ModuleNotFoundError, match=r"report_to=wandb needs .*pip install 'uncurated\[wandb\]'"):
        check_trackers("wandb")
    with pytest.raises(ModuleNotFoundError, match=r"report_to=tensorboard needs .*'uncurated\[tensorboard\]'"):
        check_trackers("tensorboard")
    check_trackers("none")


def test_wandb_runs_offline_in_the_run_folder_and_gets_every_row(fake_wandb, tmp_path):
    report = train(load_config(overrides(tmp_path, *TINY, "report_to=wandb", "name=tracked")))
    (arguments,) = fake_wandb.inits
    assert arguments["mode"] == "offline"
    assert arguments["dir"] == str(tmp_path / "tracked") and arguments["name"] == "tracked"
    assert arguments["config"]["report_to"] == "wandb" and arguments["id"]
    steps = [step for _, step in fake_wandb.rows]
    assert steps == list(range(1, report["steps"] + 1))  # log_every=1
    assert all("loss" in values and "step" not in values for values, _ in fake_wandb.rows)
    assert fake_wandb.finished == 1


def test_nothing_goes_to_an_installed_tracker_unless_asked(fake_tensorboard, fake_wandb, tmp_path):
    train(load_config(overrides(tmp_path, *TINY, "name=quiet")))
    assert fake_tensorboard.writers == [] and fake_wandb.inits == []
    assert not (tmp_path / "quiet" / "tensorboard").exists()


def test_tensorboard_gets_every_row_and_purges_past_a_resumed_step(fake_tensorboard, tmp_path):
    log = MetricsLog(
        tmp_path / "metrics.csv", ["step", "loss"], trackers=open_trackers("tensorboard", tmp_path, {}, "x", None)
    )
    log.write({"step": 1, "loss": 2.5})
    log.write({"step": 2, "loss": 2.0})
    log.close()
    resumed = open_trackers("tensorboard", tmp_path, {}, "x", 1)
    first, second = fake_tensorboard.writers
    assert first["log_dir"] == str(tmp_path / "tensorboard") and first["purge_step"] is None
    assert first["scalars"] == [("loss", 2.5, 1), ("loss", 2.0, 2)] and first["closed"]
    assert second["purge_step"] == 2  # the events past the checkpoint of step 1 go, as metrics.csv's rows do
    assert len(resumed) == 1


def test_a_resumed_run_may_change_its_trackers_and_its_evaluation_schedule():
    assert {"report_to", "eval_every"} <= RESUMABLE_CHANGES
    saved = TrainConfig().to_dict()
    assert resume_conflicts(saved, TrainConfig(report_to="wandb", eval_every=2)) == []


def test_real_tensorboard_writes_event_files(tmp_path):
    pytest.importorskip("torch.utils.tensorboard", exc_type=ImportError)
    train(load_config(overrides(tmp_path, *TINY, "report_to=tensorboard", "name=events")))
    assert list((tmp_path / "events" / "tensorboard").glob("events.out.tfevents.*"))


def test_help_describes_both_keys(capsys):
    with pytest.raises(SystemExit):
        main(["train", "--help"])
    text = capsys.readouterr().out
    assert "report_to" in text and "wandb (offline)" in text
    assert "eval_every" in text and "0: at the end only" in text
