"""The suite's runner: a test that dies in native code fails as itself, and the tests after it still run.

``make test`` runs pytest in pytest-xdist's worker processes (the Makefile's ``PYTEST``); a segmentation fault in
one test (as oneDNN's once was on CPUs without AVX-512) must not end the run, nor pass unnoticed.
"""

import re
import subprocess
import sys
from pathlib import Path

CRASHING_FILE = """
import ctypes

def test_before():
    assert True

def test_dies_in_native_code():
    ctypes.string_at(0)  # reads address 0: a segmentation fault

def test_after():
    assert True
"""


def test_make_test_runs_the_suite_in_worker_processes():
    makefile = (Path(__file__).parents[1] / "Makefile").read_text()
    runner = re.search(r"^PYTEST\s*:=\s*(.+)$", makefile, re.MULTILINE)
    assert runner is not None and " -n " in runner.group(1)
    assert re.search(r"^test:.*\n\t\$\(PYTEST\) ", makefile, re.MULTILINE)


def test_a_test_that_crashes_fails_as_itself_and_the_others_still_run(tmp_path):
    (tmp_path / "test_crash.py").write_text(CRASHING_FILE)
    result = subprocess.run(
        [sys.executable, "-m", "pytest", "-n", "1", "-q", "-p", "no:cacheprovider", "test_crash.py"],
        cwd=tmp_path,
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert result.returncode != 0
    assert "crashed while running 'test_crash.py::test_dies_in_native_code'" in result.stdout
    assert "1 failed, 2 passed" in result.stdout
