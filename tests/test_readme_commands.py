"""The README's quick start runs as written: its ``uncurated train`` and ``uncurated eval`` lines, in order, and its
Python: the tour's loop and the inference lines. Not run here: the ``pip install`` lines (they need the network)
and ``make demo`` / ``make test`` (the bench and the suite themselves).

The commands are read from README.md, never copied here. The fast tests run the training lines with ``--dry-run``
(each resolves, nothing is written), parse the evaluation lines and run the tour's loop; the slow one trains them
for real, kept tiny by :data:`TINY`, appended to each line here and not written in the README, evaluates with every
evaluation line (the image folder a line names made here, one image per class of its label set) and runs the
inference lines on two images made here.
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


def quick_start_python() -> list[str]:
    """The Python blocks of the README's tour (between its heading and the next section)."""
    text = README.read_text(encoding="utf-8")
    tour = text[text.index("## A five-minute tour") : text.index("\n## ", text.index("## A five-minute tour") + 1)]
    return re.findall(r"```python\n(.*?)```", tour, flags=re.DOTALL)


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


def test_the_readme_evaluation_commands_parse():
    from uncurated.cli import build_parser

    commands = quick_start("eval")
    assert len(commands) >= 2 and any("--zero-shot-dir" in command for command in commands)
    for command in commands:
        assert build_parser().parse_args(["eval", *command]).command == "eval", command


def test_the_readme_tour_has_its_python_and_its_loop_runs(tmp_path, monkeypatch, capsys):
    loop, inference = quick_start_python()  # one objective in your own loop; loading a run
    assert "uncurated.load_model" in inference
    monkeypatch.chdir(tmp_path)
    exec(compile(loop, "README.md", "exec"), {})
    assert capsys.readouterr().out.startswith("loss after 100 steps: ")


def image_folder_for(command: list[str], root: Path) -> list[str]:
    """``command`` with its ``--zero-shot-dir`` made under ``root``: one 28 x 28 image per class of its
    ``--class-names`` (the folder names where it names none)."""
    from imagefiles import encode, pattern

    from uncurated.evaluate.label_sets import class_names

    if "--zero-shot-dir" not in command:
        return command
    at = command.index("--zero-shot-dir") + 1
    names = class_names(command[command.index("--class-names") + 1]) if "--class-names" in command else ["a", "b"]
    folder = root / "zero-shot"
    for index in range(len(names)):
        (folder / f"{index:04d}").mkdir(parents=True)
        (folder / f"{index:04d}" / "0.png").write_bytes(encode(pattern(seed=index, size=28)))
    return [*command[:at], str(folder), *command[at + 1 :]]


@pytest.mark.slow
def test_the_readme_commands_succeed_in_order(tmp_path, monkeypatch):
    from imagefiles import encode, pattern

    monkeypatch.chdir(tmp_path)
    for command in quick_start("train"):
        assert main(["train", *command, *TINY]) == 0, command
    for command in quick_start("eval"):
        assert main(["eval", *image_folder_for(command, tmp_path / "data")]) == 0, command
    assert (tmp_path / "runs" / "captions" / "report.json").is_file()
    for name in ("cat.png", "dog.png"):
        (tmp_path / name).write_bytes(encode(pattern(seed=len(name), size=28)))
    namespace: dict = {}
    exec(compile(quick_start_python()[1], "README.md", "exec"), namespace)
    assert namespace["images"].shape[0] == 2 and namespace["texts"].shape[0] == 2
