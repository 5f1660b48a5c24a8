"""Several processes, each with its share of every batch, train exactly as one process with the whole batch.

Every objective, under both pairings, dense and tiled, with the whole batch and in micro-batches: after three
float64 steps (SGD, so each step starts where the previous left) the losses averaged over the processes, the
model's and the objective's gradients (averaged by DistributedDataParallel) and the per-sample state (each
process's rows, put together) equal one process's on the global batch to 1e-10. The cases run in
``distributed_cases.py`` under torchrun with gloo; a slice runs by default, the whole matrix is marked slow.
"""

import json
from pathlib import Path

import pytest
import torch
from distributed_cases import run_case
from launch import RUN_TIMEOUT, torchrun

from uncurated import objectives

TILED = {"tiling": "always", "block_size": 3}


def matrix() -> dict[str, dict]:
    """Every objective x pairing x engine x {whole batch, micro-batches}, and the oracle, learned scales and WPSE."""
    cases = {}
    for name in objectives.OBJECTIVES:
        for pairing in ("cross", "two_view"):
            for engine, tiling in (("dense", {"tiling": "never"}), ("tiled", TILED)):
                for micro in (0, 1):
                    params = {"pairing": pairing, **tiling}
                    if name == "clip_reg":
                        params["variant"] = "negative"  # the variant whose regularizer needs the global batch
                    cases[f"{name}-{pairing}-{engine}-{'micro' if micro else 'whole'}"] = {
                        "objective": name,
                        "params": params,
                        "micro": micro,
                    }
    for pairing in ("cross", "two_view"):
        cases[f"infonce-{pairing}-oracle"] = {"objective": "infonce", "params": {"pairing": pairing}, "labels": True}
        cases[f"infonce-{pairing}-learned"] = {
            "objective": "infonce",
            "params": {"pairing": pairing, "learnable": True},
        }
        cases[f"siglip-{pairing}-wpse"] = {"objective": "siglip", "params": {"pairing": pairing}, "wpse": True}
    cases["nuclr-cross-tiled-running"] = {"objective": "nuclr", "params": {**TILED, "xi_rule": "running"}}
    for name in ("sogclr", "nuclr", "dcl", "cyclip"):  # a process that could not read all of its share
        cases[f"{name}-two_view-uneven"] = {
            "objective": name,
            "params": {"pairing": "two_view", **TILED},
            "uneven": True,
        }
    return cases


def uneven_cross(processes: int) -> dict[str, dict]:
    """Uneven shares under the cross pairing, where every process keeps at least two pairs (two processes)."""
    if processes != 2:
        return {}
    return {
        f"{name}-cross-uneven": {"objective": name, "params": {"pairing": "cross", **TILED}, "uneven": True}
        for name in ("infonce", "nuclr", "isogclr")
    }


FAST = [
    "infonce-cross-learned",
    "siglip-cross-dense-whole",
    "cyclip-cross-tiled-micro",
    "dcl-two_view-tiled-micro",
    "isogclr-cross-tiled-micro",
    "nuclr-cross-tiled-whole",
    "nuclr-two_view-dense-micro",
    "infonce-cross-oracle",
    "nuclr-two_view-uneven",
]


def run_distributed(cases: dict[str, dict], processes: int, folder: Path, timeout: float = RUN_TIMEOUT) -> list[dict]:
    folder.mkdir(parents=True, exist_ok=True)
    script = Path(__file__).with_name("distributed_cases.py")
    torchrun(str(script), str(folder), json.dumps(cases), processes=processes, timeout=timeout)
    return [torch.load(folder / f"rank{rank}.pt", weights_only=True) for rank in range(processes)]


def assert_same_training(name: str, expected: dict, per_rank: list[dict]) -> None:
    for rank, results in enumerate(per_rank):
        got = results[name]
        assert got["losses"] == pytest.approx(expected["losses"], rel=1e-10, abs=1e-12), f"{name}: rank {rank}"
        for step, (mine, reference) in enumerate(zip(got["gradients"], expected["gradients"], strict=True)):
            assert mine.keys() == reference.keys() and reference, f"{name}: step {step}"
            for key in reference:
                torch.testing.assert_close(
                    mine[key], reference[key], rtol=1e-10, atol=1e-12, msg=f"{name}: rank {rank}, step {step}, {key}"
                )
    if expected["state"] is None:
        return
    states = [results[name]["state"] for results in per_rank]
    for key, tensor in expected["state"]["tensors"].items():
        side = key.split("/")[1]
        rows = sorted((state["ranges"][side][0], state["tensors"][key]) for state in states)
        joined = torch.cat([values for _, values in rows])
        torch.testing.assert_close(joined, tensor, rtol=1e-10, atol=1e-12, msg=f"{name}: state {key}")
    for state in states:
        assert state["scalars"] == pytest.approx(expected["state"]["scalars"], rel=1e-10), name


def check(names: list[str], processes: int, folder: Path, uneven: bool = True, timeout: float = RUN_TIMEOUT) -> None:
    cases = {name: matrix()[name] for name in names} | (uneven_cross(processes) if uneven else {})
    per_rank = run_distributed(cases, processes, folder, timeout)
    for name, case in cases.items():
        assert_same_training(name, run_case(case), per_rank)


@pytest.mark.parametrize("processes", [2, 4])
def test_a_slice_of_the_matrix(tmp_path, processes):
    check(FAST, processes, tmp_path, uneven=False)


@pytest.mark.slow
@pytest.mark.parametrize("processes", [2, 4])
def test_the_whole_matrix(tmp_path, processes):
    check(list(matrix()), processes, tmp_path, timeout=1200)
