"""The user's own loop of README.md and docs/training-at-scale.md, run as written under torchrun with gloo: plain
PyTorch DDP, no gather code, the objective splitting the batch (and NUCLR its state) by itself."""

import re
from pathlib import Path

from launch import torchrun

ROOT = Path(__file__).resolve().parents[1]


def _loop(path: Path, heading: str) -> str:
    text = path.read_text()
    return re.search(r"```python\n(.*?)```", text[text.index(heading) :], re.DOTALL).group(1)


def test_the_documented_loop_runs_under_torchrun(tmp_path):
    code = _loop(ROOT / "docs" / "training-at-scale.md", "### Your own loop")
    assert _loop(ROOT / "README.md", "## Training at scale") == code  # the README shows the same loop
    script = tmp_path / "loop.py"
    script.write_text(code)
    finished = torchrun(str(script), processes=2)
    assert "epoch 1: loss" in finished.stdout
