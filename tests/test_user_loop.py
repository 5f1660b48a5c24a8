"""The user's own loop of docs/training-at-scale.md, run as written under torchrun with gloo: plain PyTorch DDP,
no gather code, the objective splitting the batch (and NUCLR its state) by itself."""

import re
from pathlib import Path

from training import torchrun

DOC = Path(__file__).resolve().parents[1] / "docs" / "training-at-scale.md"


def test_the_documented_loop_runs_under_torchrun(tmp_path):
    text = DOC.read_text()
    section = text[text.index("### Your own loop") :]
    code = re.search(r"```python\n(.*?)```", section, re.DOTALL).group(1)
    script = tmp_path / "loop.py"
    script.write_text(code)
    finished = torchrun(str(script), processes=2, timeout=600)
    assert "epoch 1: loss" in finished.stdout
