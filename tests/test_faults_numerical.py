"""Numerical trouble: non-finite embeddings, losses and gradients are caught before the optimizer step, the step
changes nothing, it is counted, and too many in a row stop the run with the last checkpoint intact."""

import copy
import math
from pathlib import Path

import pytest
import torch
from faultutils import OBJECTIVES, TWO_VIEW, assert_identical, train_here

from uncurated import objectives
from uncurated.train import load_config
from uncurated.train.builders import TrainingParts, build_augmentation, build_model, build_objective, build_splits
from uncurated.train.checkpoint import latest_checkpoint, read_training_state, verify_checkpoint
from uncurated.train.distributed import Distributed
from uncurated.train.metrics import read_metrics
from uncurated.train.random_state import seed_everything
from uncurated.train.trainer import NonFiniteError, Trainer

pytest_plugins = ["faults_summary"]


def make_trainer(tmp_path: Path, *extra: str) -> Trainer:
    config = load_config([*TWO_VIEW, f"out={tmp_path}", "epochs=1", *extra])
    splits = build_splits(config)
    seed_everything(config.seed)
    model, objective = build_model(config, splits.train), build_objective(config, splits.train)
    parts = TrainingParts(model, objective, splits.train, build_augmentation(config), config.pipeline)
    return Trainer(config, parts, Distributed(), tmp_path / "run")


def poisoned(kind: str):
    """A replacement of ``Trainer._embed`` or ``Trainer._loss`` that makes one quantity non-finite."""
    original_embed, original_loss = Trainer._embed, Trainer._loss
    if kind == "nan images":  # a corrupt input: the forward pass (and batch norm's statistics) sees NaN
        return "_embed", lambda self, batch: original_embed(self, {**batch, "image": batch["image"] * math.nan})
    if kind == "inf loss":
        return "_loss", lambda self, *args: original_loss(self, *args) * math.inf
    if kind == "nan loss":
        return "_loss", lambda self, *args: original_loss(self, *args) * math.nan

    def nan_gradient(self, a, *args):  # a finite loss whose gradient is not
        a.register_hook(lambda grad: grad * math.nan)
        return original_loss(self, a, *args)

    return "_loss", nan_gradient


KINDS = ["nan images", "inf loss", "nan loss", "nan gradient"]


def snapshot(trainer: Trainer) -> dict:
    return copy.deepcopy(
        {
            "model": trainer.parts.model.state_dict(),
            "objective": trainer.parts.objective.state_dict(),
            "optimizer moments": trainer.optimizer.state_dict()["state"],  # the learning rate follows the schedule
        }
    )


@pytest.mark.parametrize("objective", ["infonce", "nuclr"])
def test_a_non_finite_step_changes_nothing_but_the_position(tmp_path, monkeypatch, objective, fault_record):
    trainer = make_trainer(tmp_path, *OBJECTIVES[objective])
    batches = trainer.plan.epoch(0)
    dataset = trainer.parts.dataset
    trainer.parts.model.train()
    if objective == "nuclr":
        trainer.parts.objective.set_epoch(1.0)
    trainer.step(dataset.batch(batches[0]))  # optimizer moments and per-sample state exist from here on
    for number, kind in enumerate(KINDS, start=1):
        before = snapshot(trainer)
        with monkeypatch.context() as patch:
            patch.setattr(Trainer, *poisoned(kind))
            loss = trainer.step(dataset.batch(batches[number]))
        assert_identical(before, snapshot(trainer), kind)
        assert trainer.nonfinite == {"total": number, "in_a_row": number}
        assert math.isnan(loss) or math.isinf(loss) or kind == "nan gradient"
    trainer.step(dataset.batch(batches[len(KINDS) + 1]))
    assert trainer.nonfinite == {"total": len(KINDS), "in_a_row": 0}
    assert all(torch.isfinite(p).all() for p in trainer.parts.model.parameters())
    fault_record("non-finite", len(KINDS), len(KINDS))


@pytest.mark.parametrize(
    ("peer", "reason"),
    [("loss", "non-finite loss nan"), ("gradients", "non-finite gradients"), ("update", "a non-finite state update")],
)
def test_a_peers_non_finite_verdict_skips_the_step_here_too(tmp_path, monkeypatch, capsys, peer, reason):
    """The step's verdict is the average over the processes of the loss and the finiteness of the gradients and the
    state update: a peer whose loss, gradients (say its shards of them, under FSDP2) or update were not finite
    makes this process, whose own are finite, skip the step too, for the reason every process gives."""
    trainer = make_trainer(tmp_path)
    batches, dataset = trainer.plan.epoch(0), trainer.parts.dataset
    trainer.parts.model.train()
    trainer.step(dataset.batch(batches[0]))
    index, own_average = ["loss", "gradients", "update"].index(peer), Distributed.average

    def with_the_peer(self, values: torch.Tensor) -> torch.Tensor:  # two processes: this one and the failing peer
        own = own_average(self, values)
        other = own.clone()
        other[index] = math.nan if peer == "loss" else 0.0
        return (own + other) / 2

    before = snapshot(trainer)
    monkeypatch.setattr(Distributed, "average", with_the_peer)
    trainer.step(dataset.batch(batches[1]))
    assert_identical(before, snapshot(trainer), peer)
    assert trainer.nonfinite == {"total": 1, "in_a_row": 1}
    assert f"step 0: {reason}" in capsys.readouterr().err


def inject(monkeypatch, kind: str, steps: set[int]) -> None:
    """Make ``kind`` happen at the (0-based) ``steps`` of every training run in this test."""
    name, bad = poisoned(kind)
    good = getattr(Trainer, name)
    monkeypatch.setattr(Trainer, name, lambda self, *args: (bad if self.position.step in steps else good)(self, *args))


def test_skipped_steps_are_logged_and_counted_and_the_run_finishes(tmp_path, monkeypatch, capsys, fault_record):
    steps = {2, 5, 6}
    inject(monkeypatch, "nan loss", steps)
    train_here([*TWO_VIEW, *OBJECTIVES["sogclr"], f"out={tmp_path}", "epochs=1", "name=run"])
    counts = [int(row["nonfinite_steps"]) for row in read_metrics(tmp_path / "run" / "metrics.csv")]
    assert counts == [sum(step < s for step in steps) for s in range(1, 11)]
    err = capsys.readouterr().err
    for step in steps:
        assert f"step {step}: non-finite loss nan; step skipped" in err
    fault_record("non-finite", len(steps), len(steps))


@pytest.mark.parametrize("kind", ["nan images", "nan gradient"])
def test_too_many_in_a_row_stop_the_run_naming_the_step_and_keep_the_last_checkpoint(
    tmp_path, monkeypatch, kind, fault_record
):
    inject(monkeypatch, kind, set(range(5, 10)))
    common = [
        *TWO_VIEW,
        *OBJECTIVES["nuclr"],
        f"out={tmp_path}",
        "epochs=1",
        "name=run",
        "checkpoint_every=4",
        "max_nonfinite_steps=2",
    ]
    with pytest.raises(
        NonFiniteError,
        match=r"3 non-finite steps in a row, more than max_nonfinite_steps = 2; "
        r"the last at step 7: non-finite .*step-00000004\) is intact",
    ):
        train_here(common)
    folder = latest_checkpoint(tmp_path / "run" / "checkpoints")
    assert folder.name == "step-00000004"
    verify_checkpoint(folder)
    model_state = read_training_state(folder)
    assert model_state["position"]["step"] == 4
    monkeypatch.undo()
    train_here([*common, "resume=true"])  # the cause gone, the run continues from the intact checkpoint
    fault_record("non-finite", 3, 3)


def test_non_finite_values_on_one_process_skip_the_step_on_every_process_and_stop_them_together(tmp_path):
    """Two processes, process 1's images NaN at steps 2 and 5 (its embeddings alone are not finite) and its loss NaN
    at steps 6 and 7 (its share alone): every process skips each of those steps, and at the third in a row
    (max_nonfinite_steps=2) every process stops with the same message, naming step 7 and the NaN loss they
    averaged; the checkpoint of step 4 is the latest. A process deciding on its own values would go on where the
    other skips, and stop on another message or wait in a collective the other never joins."""
    import re

    from training import torchrun_with_rank_view

    environment = {"RANK_VIEW_NAN_IMAGES": "2,5", "RANK_VIEW_NAN_LOSS": "6,7"}
    run = [f"out={tmp_path}", "name=run", "epochs=0.5", "checkpoint_every=4", "max_nonfinite_steps=2"]
    finished = torchrun_with_rank_view(*run, environment=environment, succeed=False, timeout=180)
    assert finished.returncode != 0
    refusals = re.findall(r"uncurated train: stopped: (.*)", finished.stderr)
    assert len(refusals) == 2 and len(set(refusals)) == 1, finished.stderr[-4000:]
    assert refusals[0].startswith(
        "3 non-finite steps in a row, more than max_nonfinite_steps = 2; the last at step 7: non-finite loss nan."
    ), refusals
    for step, reason in [(2, "non-finite embeddings"), (5, "non-finite embeddings"), (6, "non-finite loss nan")]:
        assert finished.stderr.count(f"step {step}: {reason}; step skipped") == 1, finished.stderr[-4000:]
    assert "PeerLost" not in finished.stderr and "lost" not in finished.stderr
    assert latest_checkpoint(tmp_path / "run" / "checkpoints").name == "step-00000004"
    counts = [int(row["nonfinite_steps"]) for row in read_metrics(tmp_path / "run" / "metrics.csv")]
    assert counts == [0, 0, 1, 1, 1, 2, 3], counts  # steps 0 to 6 logged, 2, 5 and 6 skipped; step 7 stopped it


def degenerate_batch(kind: str, step: int) -> torch.Tensor:
    """16 identical samples (every other sample a false negative), or samples whose similarities are all +-1."""
    if kind == "duplicated":
        return torch.ones(16, 8)
    return torch.cat([torch.ones(8, 8), -torch.ones(8, 8)]) * (step + 1)


@pytest.mark.parametrize("name", [spec.name for spec in objectives.available()])
@pytest.mark.parametrize("kind", ["duplicated", "saturated"])
def test_every_objective_stays_finite_on_degenerate_batches_at_extreme_temperatures(name, kind):
    """At temperatures 0.01 and 10, three steps in a row (so that the global objectives' state is used)."""
    spec = {spec.name: spec for spec in objectives.available()}[name]
    for temperature in (0.01, 10.0):
        params = (
            {"temperature": temperature, "learnable": False}
            if "learnable" in spec.defaults
            else {"temperature": temperature, "num_samples": 64}
        )
        if name == "isogclr":
            params.update(temperature_min=0.01, temperature_max=10.0)
        objective = objectives.build(name, **params)
        for step in range(3):
            a = degenerate_batch(kind, step).requires_grad_()
            b = degenerate_batch(kind, step).requires_grad_()
            if spec.stateful:
                objective.set_epoch(float(step))
                loss = objective(a, b, index=torch.arange(16) + 16 * step % 64)
            else:
                loss = objective(a, b)
            loss.backward()
            assert torch.isfinite(loss), (temperature, step)
            assert torch.isfinite(a.grad).all() and torch.isfinite(b.grad).all(), (temperature, step)
