"""`uncurated --help` and every `uncurated COMMAND --help` load neither torch nor numpy: the library is imported
when a command runs (benchmarks/cli_startup.py measures the time; this counts the modules)."""

from __future__ import annotations

import subprocess
import sys

import pytest

HELP_LINES = [
    ["--help"],
    *[[name, "--help"] for name in ("objectives", "demo", "train", "debias", "eval", "bench", "bound", "toy")],
    *[["toy", name, "--help"] for name in ("nuclr", "wpse", "dcl", "clip-margin")],
]

CHILD = """
import sys
from uncurated.cli import main
try:
    main(sys.argv[1:])
except SystemExit as stop:
    assert stop.code == 0, stop.code
heavy = sorted(name for name in ("torch", "numpy", "scipy", "sklearn", "matplotlib", "kornia") if name in sys.modules)
print("HEAVY", ",".join(heavy))
"""


@pytest.mark.parametrize("line", HELP_LINES, ids=" ".join)
def test_help_loads_no_heavy_library(line):
    done = subprocess.run([sys.executable, "-c", CHILD, *line], capture_output=True, text=True, timeout=120)
    assert done.returncode == 0, done.stderr
    assert "usage: uncurated" in done.stdout
    assert done.stdout.rstrip().splitlines()[-1] == "HEAVY", done.stdout.splitlines()[-1]


def test_lazy_packages_still_export_their_names():
    import uncurated.bench as bench
    import uncurated.train as train

    for package in (bench, train):
        for name in package.__all__:
            assert getattr(package, name) is not None, (package.__name__, name)
        assert set(package.__all__) <= set(dir(package))
    with pytest.raises(AttributeError, match="has no attribute 'nothing'"):
        train.nothing  # noqa: B018


def test_toy_defaults_are_the_toys_own():
    from uncurated import toy_defaults
    from uncurated.theory import clip_margin_toy, dcl_concentration, nuclr_toy, wpse_toy

    assert nuclr_toy.DEFAULT_SIZES is toy_defaults.NUCLR_SIZES
    assert wpse_toy.DEFAULT_STEPS is toy_defaults.WPSE_STEPS
    assert clip_margin_toy.DEFAULT_LAM is toy_defaults.CLIP_MARGIN_LAM
    assert dcl_concentration.DEFAULT_TRIALS is toy_defaults.DCL_TRIALS


def test_a_bad_probe_is_refused_before_any_work(tmp_path, capsys):
    from uncurated.cli import main

    with pytest.raises(SystemExit) as stop:
        main(["eval", str(tmp_path), "--probe", "svm"])
    assert stop.value.code == 2
    assert "argument --probe: invalid choice: 'svm' (choose from sklearn, torch)" in capsys.readouterr().err
