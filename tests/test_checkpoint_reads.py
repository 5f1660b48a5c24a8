"""A checkpoint is read once: a resumed process hashes each file it loads once, the others not at all but for their
size; the main process publishes with the checksums the writers computed (``benchmarks/resume_reads.py``)."""

from __future__ import annotations

import json
import sys
from collections import Counter
from pathlib import Path

import pytest
import torch
from training import SMOKE

from uncurated.train import file_hashes, load_config, resumption, train
from uncurated.train.checkpoint import (
    WEIGHTS,
    CheckpointError,
    latest_checkpoint,
    objective_file,
    read_checkpoint,
    read_objective_states,
    save_checkpoint,
    verify_checkpoint,
)

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import resume_reads  # noqa: E402  (a script of benchmarks/, imported by path)

hashing_once = file_hashes.hashing_once


@pytest.fixture
def hashed(monkeypatch) -> Counter:
    """The bytes hashed, by file name, while the test runs."""
    counts: Counter = Counter()
    describe = file_hashes.describe_file

    def counted(path: Path):
        counts[path.name] += path.stat().st_size
        return describe(path)

    monkeypatch.setattr(file_hashes, "describe_file", counted)
    return counts


def a_checkpoint(directory: Path) -> Path:
    model = torch.nn.Linear(64, 64)
    return save_checkpoint(directory, 3, model, {"position": 3}, objective_state={"rows": torch.ones(5)})


def file_bytes(folder: Path) -> int:
    manifest = json.loads((folder / "manifest.json").read_text())
    return sum(entry["bytes"] for entry in manifest["files"].values())


def test_choosing_then_loading_a_checkpoint_hashes_each_file_once(tmp_path, hashed):
    folder = a_checkpoint(tmp_path)
    hashed.clear()
    with hashing_once():
        assert latest_checkpoint(tmp_path) == folder
        read_checkpoint(folder)
        read_objective_states(folder, [0])
    assert sum(hashed.values()) == file_bytes(folder)
    assert set(hashed) == {"model.safetensors", "state.safetensors", objective_file(0, 1)}
    hashed.clear()
    read_checkpoint(folder)  # outside, every read verifies what it loads again
    assert set(hashed) == {"model.safetensors", "state.safetensors"}


def test_a_process_hashes_only_the_files_it_loads_and_checks_the_others_sizes(tmp_path, hashed):
    folder = a_checkpoint(tmp_path)
    hashed.clear()
    read_objective_states(folder, [0])
    assert set(hashed) == {objective_file(0, 1)}
    weights = folder / WEIGHTS
    data = bytearray(weights.read_bytes())
    data[-1] ^= 0xFF  # the same size, damaged
    weights.write_bytes(bytes(data))
    read_objective_states(folder, [0])  # the weights are not read, so not hashed
    with pytest.raises(CheckpointError, match="model.safetensors has"):
        read_checkpoint(folder)
    weights.write_bytes(bytes(data[:-1]))  # truncated: its size tells, whoever loads what
    with pytest.raises(CheckpointError, match="model.safetensors has"):
        verify_checkpoint(folder, [objective_file(0, 1)])


@pytest.mark.slow  # two short runs: about 35 s on 2 busy cores
def test_a_resumed_process_hashes_the_checkpoint_once(tmp_path, hashed, monkeypatch):
    """One process: the run, then its resume (which chooses its checkpoint and loads it), counted while it resumes."""
    common = [*SMOKE, f"out={tmp_path}", "batch_size=32", "train_subset=64", "epochs=1", "name=run"]
    train(load_config(common))
    folder = latest_checkpoint(tmp_path / "run" / "checkpoints")
    resume, during = resumption.Resuming.resume, Counter()

    def counted(self):
        hashed.clear()
        try:
            return resume(self)
        finally:
            during.update(hashed)

    monkeypatch.setattr(resumption.Resuming, "resume", counted)
    train(load_config([*common, "resume=true"]))
    assert 0 < sum(during.values()) <= 1.1 * file_bytes(folder), dict(during)


@pytest.mark.slow  # two torchruns of two processes for each of ddp and fsdp: about 70 s on 2 busy cores
@pytest.mark.parametrize("parallel", ["ddp", "fsdp"])
def test_each_of_two_processes_hashes_a_checkpoint_once_on_resume_and_its_own_files_on_save(tmp_path, parallel):
    rows = resume_reads.measure(parallel, 2, tmp_path)
    for row in rows:
        assert 0 < row["resume_bytes_hashed"] <= 1.1 * row["checkpoint_bytes"], row
    saved = [row["save_bytes_hashed"] for row in rows]
    assert sum(saved) <= 1.1 * rows[0]["checkpoint_bytes"], rows  # each file hashed once, by its writer
    if parallel == "fsdp":  # each process its own shards: the main one does not re-read the other's
        assert min(saved) > 0.3 * rows[0]["checkpoint_bytes"], rows
