"""Label-aware training (train/supervision.py): label-defined positives with label noise, the oracle, DCL's clamp
diagnostic."""

from __future__ import annotations

import csv

import pytest
import torch

from uncurated.data import TensorImageDataset
from uncurated.train import load_config, train
from uncurated.train.config import ConfigError
from uncurated.train.supervision import LabelPartners, label_partners


def _dataset(labels: list[int]) -> TensorImageDataset:
    labels = torch.tensor(labels)
    images = torch.arange(len(labels), dtype=torch.float32).div(len(labels)).view(-1, 1, 1, 1).expand(-1, 1, 2, 2)
    return TensorImageDataset(images.contiguous(), labels)


def test_label_partners_share_the_label_differ_from_the_anchor_and_depend_on_the_step_only():
    dataset = _dataset([0, 1, 2, 0, 1, 2, 0, 1, 8, 9, 9, 0])
    partners = LabelPartners(dataset, label_noise=0.0, seed=3)
    index = torch.arange(len(dataset))
    chosen = partners.partners(index, step=5)
    assert torch.equal(dataset.labels[chosen], dataset.labels)
    alone = dataset.labels == 8  # a class of one: its own partner
    assert torch.equal(chosen[alone], index[alone]) and bool((chosen[~alone] != index[~alone]).all())
    assert torch.equal(chosen, LabelPartners(dataset, seed=3).partners(index, step=5))
    draws = torch.stack([partners.partners(index, step) for step in range(50)])
    assert len(draws[:, 0].unique()) == 3  # class 0's other members all get drawn
    assert partners.images(index[:3], 5).shape == (3, 1, 2, 2)


def test_processes_sharing_a_batch_draw_the_partners_one_process_draws():
    """Each of two processes takes its rows' numbers of the step's draw: sample k of each share draws its own."""
    dataset = _dataset([0, 1] * 16)
    partners = LabelPartners(dataset, seed=3)
    index = torch.randperm(len(dataset), generator=torch.Generator().manual_seed(0))[:16]
    whole = partners.partners(index, step=4)
    shares = [partners.partners(index[rows], step=4, rows=rows) for rows in (slice(0, 8), slice(8, 16))]
    assert torch.equal(torch.cat(shares), whole)


def test_label_noise_flips_about_eta_over_two_of_the_labels_to_related_classes():
    labels = [0, 2, 5] * 2000
    partners = LabelPartners(_dataset(labels), label_noise=0.8, seed=0)
    assert 0.35 < float(partners.flipped.double().mean()) < 0.45
    chosen = partners.partners(torch.arange(len(labels)), step=0)
    assert torch.equal(partners.labels[chosen], partners.labels)  # positives follow the noisy labels
    assert set(partners.labels[torch.tensor(labels) == 0].tolist()) == {0, 6}


def test_label_partners_need_labels_and_two_views():
    config = load_config(["preset=digits", "positives=label"])
    unlabelled = TensorImageDataset(torch.rand(4, 1, 2, 2))
    with pytest.raises(ConfigError, match="labelled"):
        label_partners(config, unlabelled)
    with pytest.raises(ConfigError, match="positives must be one of"):
        label_partners(load_config(["preset=digits", "positives=labels"]), unlabelled)
    assert label_partners(load_config(["preset=digits"]), unlabelled) is None
    with pytest.raises(ConfigError, match="label_noise applies to positives=label"):
        label_partners(load_config(["preset=digits", "label_noise=0.4"]), unlabelled)


def test_training_with_label_positives_label_noise_and_the_oracle_logs_dcl_clamping(tmp_path, fast_probe):
    report = train(
        load_config(
            [
                "preset=digits",
                f"out={tmp_path}",
                "name=run",
                "objective=dcl",
                "objective.temperature=0.5",
                "positives=label",
                "label_noise=0.8",
                "oracle_negatives=true",
                "epochs=0.2",
                "progress=false",
                "probe_train_size=200",
                "log_every=1",
                "widths=[32, 16]",
            ]
        )
    )
    assert report["steps"] >= 2
    with (tmp_path / "run" / "metrics.csv").open(newline="") as file:
        rows = list(csv.DictReader(file))
    assert rows and all(0.0 <= float(row["dcl_clamped_fraction"]) <= 1.0 for row in rows)


def test_the_oracle_passes_the_batch_labels_to_the_objective(tmp_path, monkeypatch, fast_probe):
    from uncurated.objectives import InfoNCE

    seen = []
    original = InfoNCE.forward

    def spy(self, a, b, **kwargs):
        seen.append(kwargs.get("labels"))
        return original(self, a, b, **kwargs)

    monkeypatch.setattr(InfoNCE, "forward", spy)
    train(
        load_config(
            [
                "preset=digits",
                f"out={tmp_path}",
                "name=oracle",
                "oracle_negatives=true",
                "epochs=0.1",
                "progress=false",
                "probe_train_size=200",
                "widths=[32, 16]",
            ]
        )
    )
    assert seen and all(labels is not None and labels.shape == (128,) for labels in seen)
