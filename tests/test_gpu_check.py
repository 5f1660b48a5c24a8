"""``make gpu-check`` without a GPU: the same checks at tiny sizes on the CPU, so that the script cannot rot."""

from __future__ import annotations

import importlib.util
import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"
KERNELS = importlib.util.find_spec("triton") is not None
"""Whether the fused engine runs (the dev install has triton; without it the check records why it skipped)."""


def test_the_gpu_check_runs_every_check_on_the_cpu_and_writes_its_report(tmp_path):
    output = tmp_path / "gpu_check.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--device", "cpu", "--output", str(output)],
        capture_output=True,
        text=True,
        timeout=900,
    )
    assert done.returncode == 0, done.stdout[-3000:] + done.stderr[-3000:]
    report = json.loads(output.read_text())
    assert report["device_type"] == "cpu" and report["device"] and report["passed"]
    checks = report["checks"]
    assert set(checks) == {
        "objectives",
        "precision",
        "loss_speed",
        "kernel_configs",
        "training_step",
        "device_hygiene",
        "distributed",
    }
    assert all(record["passed"] for record in checks.values())
    assert report["tilings"]["fused"] == {"tiling": "triton"}  # the Triton kernels are one of the engines checked
    runs = checks["objectives"]["runs"]
    fused = KERNELS and not checks["objectives"]["skipped"]
    assert fused == KERNELS  # under Triton's interpreter (set by the script without CUDA) the kernels run
    assert len(runs) == 10 * (len(report["tilings"]) - (not KERNELS))  # every objective under every engine
    assert max(run["worst_relative_error"] for run in runs.values()) <= checks["objectives"]["tolerance"]
    speed = checks["loss_speed"]
    engines = ["tiled", "fused"] if KERNELS else ["tiled"]
    assert speed["dtypes"] == ["bfloat16", "float32"] and speed["engines"] == engines
    found = {(row["batch"], row["dtype"], row["objective"], row["engine"]) for row in speed["rows"]}
    sizes = report["sizes"]
    for batch in sizes["speed_batches"]:
        for dtype in speed["dtypes"]:
            assert (batch, dtype, "floor", "torch.mm") in found
            assert {(batch, dtype, name, engine) for name in ("infonce", "nuclr") for engine in engines} <= found
    assert all(row["seconds"] > 0 and row["over_floor"] > 0 for row in speed["rows"])
    picture = output.with_suffix(".png")
    assert speed["plot"] == picture.name and picture.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    if KERNELS:  # candidates of three block shapes per type under the interpreter, each the dense engine's values
        for record in checks["kernel_configs"]["types"].values():
            shapes = {
                (run["config"]["block_m"], run["config"]["block_k"], run["config"]["block_d"]) for run in record["runs"]
            }
            assert len(shapes) == record["tried"] == 3 and record["runs"][0]["config"] == record["launched"]
            assert all(run["agrees"] for run in record["runs"]) and record["best"] in record["runs"]
            assert record["launched_over_best"] >= 1.0 and record["table_entry"] is None  # no table from a CPU
    assert checks["training_step"]["samples_per_second"] > 0
    assert checks["distributed"]["backend"] == "gloo"


def test_a_failing_check_is_reported_and_the_others_still_run(monkeypatch):
    sys.path.insert(0, str(SCRIPT.parent))
    import gpu_check
    import torch

    def broken(context):
        raise RuntimeError("a broken kernel")

    checks = [gpu_check.Check("broken", broken), gpu_check.Check("fine", lambda context: {"passed": True})]
    monkeypatch.setattr(gpu_check, "CHECKS", checks)
    report = gpu_check.run_checks(gpu_check.Context(torch.device("cpu"), gpu_check.TINY))
    assert report["broken"]["passed"] is False and "a broken kernel" in report["broken"]["error"]
    assert report["fine"]["passed"] is True


def test_a_table_entry_reads_back_as_the_config_it_names():
    sys.path.insert(0, str(SCRIPT.parent))
    import gpu_check

    from uncurated.objectives.tiled.kernels.configs import KernelConfig

    config = KernelConfig(128, 128, 32, 64, 4, 2)
    entry = gpu_check.table_entry(("sm_90", 512, "bfloat16"), config)
    assert eval("{" + entry + "}", {"KernelConfig": KernelConfig}) == {("sm_90", 512, "bfloat16"): config}
    launched = KernelConfig(64, 64, 64, 128, 8, 3)
    listed = [launched, KernelConfig(128, 128, 32, 64, 8, 3), KernelConfig(64, 64, 64, 128, 4, 3)]
    assert gpu_check.candidate_order(launched, listed[::-1]) == [launched, listed[2], listed[1]]  # one factor first
    assert gpu_check.distinct_shapes(launched, listed) == [launched, listed[1]]  # warps alone: the same shape
