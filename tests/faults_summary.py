"""A pytest plugin for the fault tests: the faults they inject and handle, printed as one table at the end.

Each ``tests/test_faults_*.py`` registers it with ``pytest_plugins = ["faults_summary"]``
and calls the ``fault_record`` fixture (:func:`record`) once a test has checked what it injected. The table
(one line per family: injected, handled, lost) appears after the test results
whenever a fault test ran; ``lost`` is what was injected and not accounted for.
"""

from __future__ import annotations

from collections import Counter

import pytest

#: The families of faults, in the table's order, with what "handled" means for each.
FAMILIES = {
    "kill": "SIGKILLs (at random steps and inside checkpoint writes), resumed to the uninterrupted run's state",
    "corrupt checkpoint": "damaged checkpoints detected by checksum and passed over",
    "malicious checkpoint": "code planted in a run folder (checksums rewritten to match) refused unrun by every loader",
    "bad data": "bad samples and shards skipped, and counted under their reason",
    "non-finite": "non-finite losses and gradients caught before the optimizer step",
    "resource": "full disks, busy run folders and incompatible resumes refused with the previous state intact",
    "distributed": "dead peers noticed by the surviving process, which exits instead of hanging",
    "fuzz": "random inputs to loaders, configuration and CLI answered with a result or a clear error",
}

_INJECTED: Counter[str] = Counter()
_HANDLED: Counter[str] = Counter()


def record(family: str, injected: int, handled: int) -> None:
    """Count ``injected`` faults of ``family`` (a key of :data:`FAMILIES`), of which ``handled`` were handled."""
    if family not in FAMILIES:
        raise ValueError(f"family must be one of {', '.join(FAMILIES)}, got {family!r}")
    _INJECTED[family] += injected
    _HANDLED[family] += handled


@pytest.fixture
def fault_record():
    """:func:`record`, for the tests (which do not import this plugin, so that pytest can rewrite its asserts)."""
    return record


def summary_lines() -> list[str]:
    """The table: a header, then one line per family that recorded anything."""
    lines = [f"{'family':<19} {'injected':>8} {'handled':>8} {'lost':>5}  handled means"]
    for family, meaning in FAMILIES.items():
        if family in _INJECTED:
            injected, handled = _INJECTED[family], _HANDLED[family]
            lines.append(f"{family:<19} {injected:>8} {handled:>8} {injected - handled:>5}  {meaning}")
    return lines


def pytest_terminal_summary(terminalreporter, exitstatus, config) -> None:
    if _INJECTED:
        terminalreporter.section("faults injected and handled")
        for line in summary_lines():
            terminalreporter.write_line(line)
