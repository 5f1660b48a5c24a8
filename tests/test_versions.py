"""A torch or triton outside the tested releases is told once, at ``import uncurated``, naming the range."""

from __future__ import annotations

import os
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import torch

from uncurated import versions

SRC = Path(__file__).parent.parent / "src"


@pytest.mark.parametrize(
    "package, version, told",
    [
        ("torch", "2.10.1+cu128", True),
        ("torch", "2.11.0+cu130", False),
        ("torch", "2.13.0+cpu", False),
        ("torch", "2.14.1", False),
        ("torch", "2.15.0", True),
        ("torch", "3.0.0", True),
        ("triton", "3.5.1", True),
        ("triton", "3.6.0", False),
        ("triton", "3.9.0", False),
        ("triton", "3.10.0", True),
        ("torch", "nightly", False),
    ],
)
def test_a_release_outside_the_range_is_told_with_the_range(package, version, told):
    message = versions.untested(package, version)
    assert (message is not None) == told
    if told:
        low, high = (".".join(map(str, end)) for end in versions.TESTED[package])
        assert f"tested with {package} {low} to {high}; {package} {version} is installed" in message


def test_the_suites_own_torch_and_triton_are_in_the_range():
    """Each pair CI runs (make test, make test-oldest, make test-newest) is inside TESTED, so the range cannot drift
    from it."""
    assert versions.installed_version("torch") == torch.__version__
    assert versions.untested("torch", torch.__version__) is None
    triton = versions.installed_version("triton")
    assert triton is None or versions.untested("triton", triton) is None


def test_one_warning_per_package_outside(monkeypatch):
    monkeypatch.setattr(versions, "installed_version", {"torch": "2.9.0", "triton": "3.5.0"}.get)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        versions.warn_untested()
    assert [w.category for w in caught] == [versions.UntestedVersionWarning] * 2
    assert "torch 2.11 to 2.14" in str(caught[0].message) and "triton 3.6 to 3.9" in str(caught[1].message)
    monkeypatch.setattr(versions, "installed_version", {"torch": "2.12.0"}.get)
    with warnings.catch_warnings(record=True) as caught:
        warnings.simplefilter("always")
        versions.warn_untested()
    assert caught == []


def test_import_uncurated_warns_once_without_importing_torch(tmp_path):
    """A torch whose version file says 2.9.0 and whose package refuses to import: ``import uncurated`` warns once
    and never imports it."""
    fake = tmp_path / "torch"
    fake.mkdir()
    (fake / "__init__.py").write_text("raise ImportError('torch was imported')\n")
    (fake / "version.py").write_text("__version__ = '2.9.0'\n")
    environment = {**os.environ, "PYTHONPATH": os.pathsep.join([str(tmp_path), str(SRC)])}
    done = subprocess.run(
        [sys.executable, "-W", "always", "-c", "import uncurated"],
        env=environment,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert done.returncode == 0, done.stderr
    assert done.stderr.count("UntestedVersionWarning") == 1, done.stderr
    assert "uncurated is tested with torch 2.11 to 2.14; torch 2.9.0 is installed" in done.stderr


def test_the_makefiles_oldest_pair_opens_the_range_and_its_newest_torch_closes_it():
    """``make test-oldest`` installs the low end of :data:`~uncurated.versions.TESTED` and ``make test-newest`` the
    newest torch, inside the tested triton releases (its torch pins its own triton; ``make test``'s takes the newest
    triton): a pair moved in the Makefile, or a range moved in the code, fails here rather than in a user's
    warning."""
    makefile = (Path(__file__).parent.parent / "Makefile").read_text()
    pairs = {}
    for end in ("oldest", "newest"):
        line = next(line for line in makefile.splitlines() if line.startswith(f"PAIR_{end} "))
        pairs[end] = dict(pin.split("==") for pin in line.split("?=")[1].split())
    for package, (oldest, _) in versions.TESTED.items():
        assert versions.release(pairs["oldest"][package]) == oldest
        assert versions.untested(package, pairs["newest"][package]) is None
    assert versions.release(pairs["newest"]["torch"]) == versions.TESTED["torch"][1]
