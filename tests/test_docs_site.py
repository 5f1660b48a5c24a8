"""The documentation: a short README whose links resolve, and a site that mkdocs builds with --strict."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

ROOT = pathlib.Path(__file__).resolve().parents[1]
README = ROOT / "README.md"
LINK = re.compile(r"\]\(([^)#\s]+)(?:#[^)]*)?\)")


def test_readme_is_a_front_page():
    text = README.read_text(encoding="utf-8")
    assert len(text.splitlines()) <= 300
    for command in ("make demo", "make test"):
        assert command in text


def test_readme_links_resolve():
    targets = [t for t in LINK.findall(README.read_text(encoding="utf-8")) if "://" not in t]
    assert targets, "the README links into docs/"
    missing = [t for t in targets if not (ROOT / t).exists()]
    assert not missing, f"README.md links to missing files: {missing}"


def test_every_docs_page_is_in_the_site_navigation():
    yaml = pytest.importorskip("yaml")
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    in_nav = {next(iter(entry.values())) for entry in config["nav"]}
    pages = {p.name for p in (ROOT / "docs").glob("*.md")}
    assert pages == in_nav


def test_site_builds_strictly(tmp_path):
    pytest.importorskip("mkdocs", reason="mkdocs is not installed (pip install -e '.[docs]')")
    result = subprocess.run(
        [sys.executable, "-m", "mkdocs", "build", "--strict", "--site-dir", str(tmp_path / "site")],
        cwd=ROOT,
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert result.returncode == 0, result.stdout + result.stderr
    assert (tmp_path / "site" / "objectives" / "index.html").exists()


def test_readme_tour_runs(tmp_path):
    """The tour's first example (an objective in one's own loop) runs as printed."""
    text = README.read_text(encoding="utf-8")
    code = re.search(r"```python\n(.*?)```", text, re.S).group(1)
    script = tmp_path / "tour.py"
    script.write_text(code, encoding="utf-8")
    result = subprocess.run([sys.executable, str(script)], capture_output=True, text=True, timeout=600)
    assert result.returncode == 0, result.stderr
    assert "loss after 100 steps:" in result.stdout


def test_readme_setup_starts_with_pip_install_and_the_cpu_build_of_torch():
    text = README.read_text(encoding="utf-8")
    setup = text[text.index("## Setup") :]
    first_block = setup[setup.index("```sh") : setup.index("```", setup.index("```sh") + 5)]
    commands = [line.split("#")[0].strip() for line in first_block.splitlines()[1:] if line.strip()]
    assert commands[0] == "pip install torch --index-url https://download.pytorch.org/whl/cpu"
    assert "pip install uncurated" in commands
    assert any(command.startswith("pip install 'uncurated[") for command in commands)  # the extras
    assert setup.index("pip install") < setup.index("make test")


def test_the_makefile_says_which_torch_build_its_plain_install_gets():
    makefile = (ROOT / "Makefile").read_text(encoding="utf-8")
    header = makefile[: makefile.index("PYTHON ?=")]
    assert "(the CPU build)" not in header  # a plain `pip install torch==2.13.0` is the CUDA build from PyPI on Linux
    assert "CUDA build" in header and "TORCH_INDEX=https://download.pytorch.org/whl/cpu" in header
    assert '"$(TORCH)" $(if $(TORCH_INDEX),--index-url $(TORCH_INDEX))' in makefile
