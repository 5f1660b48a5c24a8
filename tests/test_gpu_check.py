"""``make gpu-check`` without a GPU: the same checks at tiny sizes on the CPU, so that the script cannot rot."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"


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
    assert set(checks) == {"objectives", "precision", "loss_speed", "training_step", "device_hygiene", "distributed"}
    assert all(record["passed"] for record in checks.values())
    runs = checks["objectives"]["runs"]
    assert len(runs) == 10 * len(report["tilings"])  # every objective under every engine
    assert max(run["worst_relative_error"] for run in runs.values()) <= checks["objectives"]["tolerance"]
    methods = {row["method"] for row in checks["loss_speed"]["rows"]}
    assert {"floor", "infonce/tiled", "nuclr/tiled", "isogclr/tiled"} <= methods
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
