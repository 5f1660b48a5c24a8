"""The torch and triton releases the suite runs under, and one warning at import for an installed one outside them.

CI runs the suite with the Makefile's pair (``make test``) and the fused kernels', the sharded checkpoints' and a
training's tests with the oldest and the newest pair (``make test-oldest``, ``make test-newest``); :data:`TESTED`
spans them. An installed release
outside is told once, when ``uncurated`` is imported, with the range, never first met as a crash deep in a kernel
or a checkpoint. The versions are read from the packages' own version files, without importing them: ``import
uncurated`` (and ``uncurated --help``) loads neither torch nor triton.
"""

from __future__ import annotations

import importlib.util
import os
import re
import warnings

TESTED = {"torch": ((2, 11), (2, 14)), "triton": ((3, 6), (3, 9))}
"""Each package's oldest and newest tested release (major, minor), both included."""
VERSION_FILES = {"torch": "version.py", "triton": "__init__.py"}
"""Where each package writes ``__version__ = '...'``, inside its folder."""
_VERSION_LINE = re.compile(r"^__version__\s*=\s*['\"]([^'\"]+)['\"]", re.MULTILINE)


class UntestedVersionWarning(UserWarning):
    """torch or triton is installed at a release outside :data:`TESTED`."""


def installed_version(package: str) -> str | None:
    """``package``'s version as its version file says (``"2.11.0+cu130"``), or None: not installed, or unreadable."""
    spec = importlib.util.find_spec(package)
    if spec is None or not spec.submodule_search_locations:
        return None
    try:
        with open(os.path.join(next(iter(spec.submodule_search_locations)), VERSION_FILES[package])) as file:
            text = file.read()
    except OSError:
        return None
    found = _VERSION_LINE.search(text)
    return found.group(1) if found else None


def release(version: str) -> tuple[int, int] | None:
    """``(major, minor)`` of ``version`` (``"2.11.0+cu130"``: ``(2, 11)``), or None where it does not start so."""
    found = re.match(r"(\d+)\.(\d+)", version)
    return (int(found.group(1)), int(found.group(2))) if found else None


def untested(package: str, version: str) -> str | None:
    """The warning for ``package`` at ``version``, or None where it is in :data:`TESTED` (or unparsable)."""
    (oldest, newest), found = TESTED[package], release(version)
    if found is None or oldest <= found <= newest:
        return None
    low, high = (".".join(map(str, end)) for end in (oldest, newest))
    return (
        f"uncurated is tested with {package} {low} to {high}; {package} {version} is installed. It may work; "
        f"where it fails, install a tested {package}."
    )


def warn_untested() -> None:
    """One :class:`UntestedVersionWarning` per installed package outside :data:`TESTED`."""
    for package in TESTED:
        version = installed_version(package)
        message = None if version is None else untested(package, version)
        if message is not None:
            warnings.warn(message, UntestedVersionWarning, stacklevel=3)
