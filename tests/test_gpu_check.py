"""``make gpu-check`` without a GPU: refused, and with --cpu-smoke the same checks at tiny sizes on the CPU, so that the
script cannot rot; its report written after every check, within a time budget."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
from pathlib import Path

import pytest
import torch

SCRIPT = Path(__file__).resolve().parents[1] / "benchmarks" / "gpu_check.py"
KERNELS = importlib.util.find_spec("triton") is not None
"""Whether the fused engine runs (the dev install has triton; without it the check records why it skipped)."""


def test_the_gpu_check_runs_every_check_on_the_cpu_and_writes_its_report(tmp_path):
    output = tmp_path / "gpu_check.json"
    done = subprocess.run(
        [sys.executable, str(SCRIPT), "--cpu-smoke", "--output", str(output)],
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
    dims = report["sizes"]["objective_dims"]
    engines_run = len(report["tilings"]) - (not KERNELS)
    assert len(runs) == 10 * engines_run * len(dims) == len({run.rsplit("/", 1)[1] for run in runs}) * 10 * engines_run
    precision = checks["precision"]["runs"]
    assert {run.split("/")[1] for run in precision} == ({"dense", "tiled", "fused"} if KERNELS else {"dense", "tiled"})
    assert report["skipped"] == [] and report["pending"] == []
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
    gpu_check = gpu_check_module()

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


def gpu_check_module():
    sys.path.insert(0, str(SCRIPT.parent))
    import gpu_check

    return gpu_check


def test_without_cuda_it_refuses_and_exits_non_zero(monkeypatch, capsys, tmp_path):
    gpu_check = gpu_check_module()
    monkeypatch.setattr(torch.cuda, "is_available", lambda: False)
    output = tmp_path / "report.json"
    for arguments in ([], ["--device", "cuda:1"], ["--device", "cpu"], ["--tiny"]):
        assert gpu_check.main([*arguments, "--output", str(output)]) == 2
        assert "no CUDA device here" in capsys.readouterr().err
    assert not output.exists()


@pytest.mark.skipif(shutil.which("make") is None, reason="make is not installed")
def test_make_gpu_check_with_cuda_hidden_refuses_installs_nothing_and_exits_non_zero(tmp_path):
    """The Makefile's dry run with a given Python and CUDA_VISIBLE_DEVICES empty (so torch sees no device, even on a
    GPU machine): the one command it runs is the check, which refuses, writes no report and fails the make."""
    output = tmp_path / "report.json"
    command = [
        "make",
        "-C",
        str(SCRIPT.parents[1]),
        "gpu-check",
        f"PY={sys.executable}",
        f"GPU_CHECK_ARGS=--output {output}",
    ]
    environment = {**os.environ, "CUDA_VISIBLE_DEVICES": ""}
    done = subprocess.run(command, capture_output=True, text=True, timeout=300, env=environment)
    assert done.returncode != 0
    assert "gpu_check: no CUDA device here" in done.stderr and "--cpu-smoke runs the tiny sizes" in done.stderr
    commands = [line for line in done.stdout.splitlines() if not line.startswith("make")]
    assert commands == [f"PYTHONPATH=src {sys.executable} benchmarks/gpu_check.py --output {output}"]
    assert not output.exists()


def quick_checks(gpu_check, seen: list, output: Path) -> list:
    """Checks that record which checks the JSON on disk held when each started."""

    def check(name):
        def run(context):
            seen.append((name, sorted(json.loads(output.read_text())["checks"])))
            return {"passed": True}

        return gpu_check.Check(name, run)

    return [check("first"), check("second"), check("third")]


def test_the_report_is_written_after_every_check(monkeypatch, tmp_path):
    gpu_check, seen, output = gpu_check_module(), [], tmp_path / "report.json"
    monkeypatch.setattr(gpu_check, "CHECKS", quick_checks(gpu_check, seen, output))
    assert gpu_check.main(["--cpu-smoke", "--output", str(output)]) == 0
    assert seen == [("first", []), ("second", ["first"]), ("third", ["first", "second"])]
    report = json.loads(output.read_text())
    assert report["passed"] and report["pending"] == [] and set(report["checks"]) == {"first", "second", "third"}


KILLED = """
import os, signal, sys
sys.path.insert(0, sys.argv[1])
import gpu_check

def killed(context):
    os.kill(os.getpid(), signal.SIGKILL)

gpu_check.CHECKS = [
    gpu_check.Check("first", lambda context: {"passed": True, "answer": 42}),
    gpu_check.Check("killed", killed),
    gpu_check.Check("never", lambda context: {"passed": True}),
]
gpu_check.main(["--cpu-smoke", "--output", sys.argv[2]])
"""


def test_a_run_killed_halfway_keeps_the_checks_done(tmp_path):
    output = tmp_path / "report.json"
    done = subprocess.run(
        [sys.executable, "-c", KILLED, str(SCRIPT.parent), str(output)], capture_output=True, text=True, timeout=120
    )
    assert done.returncode == -9, done.stderr
    report = json.loads(output.read_text())
    assert report["checks"] == {
        "first": {"passed": True, "answer": 42, "seconds": report["checks"]["first"]["seconds"]}
    }
    assert report["pending"] == ["killed", "never"]


def test_a_check_that_would_not_fit_the_budget_is_listed_as_skipped_never_started(monkeypatch):
    gpu_check, started = gpu_check_module(), []
    checks = [
        gpu_check.Check("short", lambda context: started.append("short") or {"passed": True}, 1),
        gpu_check.Check("long", lambda context: started.append("long") or {"passed": True}, 10_000),
        gpu_check.Check("after", lambda context: started.append("after") or {"passed": True}, 1),
    ]
    monkeypatch.setattr(gpu_check, "CHECKS", checks)
    context = gpu_check.Context(torch.device("cpu"), gpu_check.TINY, estimated=True)
    report = gpu_check.run_checks(context, budget_seconds=60)
    assert started == ["short", "after"]
    assert report["long"]["passed"] is None and "over the budget: 10000 s estimated" in report["long"]["skipped"]
    report = gpu_check.run_checks(context, budget_seconds=0)
    assert all(record["passed"] is None for record in report.values()) and started == ["short", "after"]


def test_the_budget_is_checked(capsys):
    with pytest.raises(SystemExit):
        gpu_check_module().main(["--cpu-smoke", "--budget-minutes", "-1"])
    assert "--budget-minutes must be at least 0, got -1" in capsys.readouterr().err


def test_a_missing_package_is_named_with_the_wheel_to_bring(monkeypatch):
    gpu_check = gpu_check_module()

    def needs_kornia(context):
        raise ModuleNotFoundError("No module named 'kornia'", name="kornia")

    monkeypatch.setattr(gpu_check, "CHECKS", [gpu_check.Check("augment", needs_kornia)])
    record = gpu_check.run_checks(gpu_check.Context(torch.device("cpu"), gpu_check.TINY))["augment"]
    assert record["passed"] is False and record["missing"] == "kornia"
    assert "pip download kornia --no-deps" in record["error"]


def test_the_script_imports_no_package_before_a_check_asks():
    probe = "import sys; sys.path.insert(0, sys.argv[1]); import gpu_check; print(sorted(sys.modules))"
    environment = {**os.environ, "PYTHONPATH": str(SCRIPT.parents[1] / "src")}
    done = subprocess.run(
        [sys.executable, "-c", probe, str(SCRIPT.parent)], capture_output=True, text=True, timeout=120, env=environment
    )
    assert done.returncode == 0, done.stderr
    loaded = {name.split(".")[0] for name in eval(done.stdout)}
    assert not loaded & {"kornia", "matplotlib", "transformers", "sklearn", "open_clip", "triton", "scipy"}
