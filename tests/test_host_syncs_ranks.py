"""Host synchronizations of a training step under ``torchrun`` (``benchmarks/host_syncs_ranks.py``): at most two
per process for CLIP and NUCLR, the collectives counted apart."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "benchmarks"))
import host_syncs_ranks  # noqa: E402  (a script of benchmarks/, imported by path)


@pytest.mark.slow  # a torchrun of two processes: about 35 s on 2 busy cores
def test_a_trainer_step_of_two_processes_reads_the_device_twice_on_each(tmp_path):
    """One read before the objective (every process's batch size with its embeddings' finiteness), one after the
    backward pass (the loss with the gradients' finiteness); NUCLR's rows are read and written without a boolean
    mask and its updates refused on the device, on every process alike."""
    rows = host_syncs_ranks.launch(["clip", "nuclr"], ["dense"], 2, tmp_path)
    assert [(row["objective"], row["rank"]) for row in rows] == [("clip", 0), ("clip", 1), ("nuclr", 0), ("nuclr", 1)]
    for row in rows:
        assert row["trainer_syncs"] <= 2, row
        assert any("process/shard.py" in site for site in row["sites"]), row["sites"]
        assert any(site.startswith("_allgather_base_") for site in row["collectives"]), row["collectives"]
