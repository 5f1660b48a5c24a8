"""The README's quick start runs as written: its ``uncurated train`` lines (and ``uncurated eval``), in order.

The commands are read from README.md, never copied here. The fast test runs them with ``--dry-run`` (each
resolves, nothing is written); the slow one trains them for real, kept tiny by :data:`TINY`, appended to each
line here and not written in the README.
"""

from __future__ import annotations

import re
import shlex
from pathlib import Path

import pytest

from uncurated.cli import main

README = Path(__file__).resolve().parents[1] / "README.md"
#: Appended to each training line of the slow test: a few steps and a small probe.
TINY = ("train_subset=512", "epochs=1", "probe_train_size=500", "progress=false", "log_every=1")


def quick_start(kind: str) -> list[list[str]]:
    """The ``uncurated KIND ...`` lines of the README's shell blocks, as argument lists without their comments."""
    blocks = re.findall(r"```sh\n(.*?)```", README.read_text(encoding="utf-8"), flags=re.DOTALL)
    lines = [shlex.split(line, comments=True) for block in blocks for line in block.splitlines()]
    return [words[2:] for words in lines if words[:2] == ["uncurated", kind]]


def test_the_readme_has_its_training_commands():
    commands = quick_start("train")
    assert len(commands) >= 4
    assert any("resume=true" in command for command in commands)


def test_the_readme_training_commands_resolve_in_order(tmp_path, monkeypatch, capsys):
    monkeypatch.chdir(tmp_path)
    for command in quick_start("train"):
        assert main(["train", "--dry-run", *command]) == 0, command
    capsys.readouterr()
    assert list(tmp_path.iterdir()) == []


@pytest.mark.slow
def test_the_readme_commands_succeed_in_order(tmp_path, monkeypatch):
    monkeypatch.chdir(tmp_path)
    for command in quick_start("train"):
        assert main(["train", *command, *TINY]) == 0, command
    evaluations = [command for command in quick_start("eval") if len(command) == 1]
    for command in evaluations:
        assert main(["eval", *command]) == 0, command
    assert (tmp_path / "runs" / "captions" / "report.json").is_file()
