"""Citations: one module holds them, the docs page is written from it, and user-facing text names papers."""

from __future__ import annotations

import pathlib
import re
import subprocess
import sys

import pytest

from uncurated import objectives
from uncurated.references import CORE_PAPERS, REFERENCES, cite

ROOT = pathlib.Path(__file__).resolve().parents[1]

# What a user reads: the package's source (docstrings, --help, errors, the bench's claims), its presets, the
# README and the documentation with the committed bench reports. A paper is cited by its authors, never by
# the number of a file of ours ("seed 000") or of an engineering note ("digest 002"); a digest of a file (a hash)
# is not a citation, so only "digest" followed by a number or a section sign is.
USER_FACING = [ROOT / "src" / "uncurated", ROOT / "README.md", ROOT / "docs", ROOT / "CITATION.cff"]
INTERNAL_CITATION = re.compile(r"seeds? 00[0-4]|\bdigests? (?:[0-9]|§)", re.IGNORECASE)


def _user_facing_files():
    for path in USER_FACING:
        files = [path] if path.is_file() else sorted(p for p in path.rglob("*") if p.is_file())
        for file in files:
            if file.suffix in {".png", ".pyc", ".safetensors"} or "__pycache__" in file.parts:
                continue
            yield file


def _as_prose(text: str) -> str:
    """``text`` with its line breaks, indentation and comment marks as single spaces, so that a phrase split across
    lines (``(seed`` at the end of one, ``004's`` at the start of the next) reads as one."""
    return re.sub(r"[\s#]+", " ", text)


def test_no_user_facing_text_cites_a_seed_or_a_digest():
    found = []
    for file in _user_facing_files():
        prose = _as_prose(file.read_text(encoding="utf-8"))
        found += [
            f"{file.relative_to(ROOT)}: ...{prose[max(m.start() - 60, 0) : m.end() + 20]}..."
            for m in INTERNAL_CITATION.finditer(prose)
        ]
    assert not found, "cite papers by name (uncurated.references.cite):\n" + "\n".join(found)


def test_the_check_catches_what_it_should():
    assert INTERNAL_CITATION.search("seed 003's margins")
    assert INTERNAL_CITATION.search("(Seed 000, Table 1)")
    assert INTERNAL_CITATION.search("see digest 002, Sec. 7.2")
    assert not INTERNAL_CITATION.search('"sha256": hasher.hexdigest()')
    assert not INTERNAL_CITATION.search("seed 0, seeds 0 1 2")
    assert not INTERNAL_CITATION.search("a digest of the source files")
    assert INTERNAL_CITATION.search(_as_prose("views (seed\n    # 004's augmentations)"))


def test_every_objective_names_papers_that_exist():
    for spec in objectives.available():
        assert spec.cls.papers, f"{spec.name} cites no paper"
        assert all(key in REFERENCES for key in spec.cls.papers)
        assert [reference.key for reference in spec.papers] == list(spec.cls.papers)


def test_the_five_papers_and_every_method_have_an_entry():
    assert set(CORE_PAPERS) <= set(REFERENCES)
    labels = " ".join(reference.label for reference in REFERENCES.values())
    for method in ("InfoNCE", "SimCLR", "CLIP", "SigLIP", "CyCLIP", "DCL", "HCL", "RINCE", "SogCLR", "iSogCLR"):
        assert re.search(rf"\b{method}\b", labels), method


def test_entries_are_complete_and_their_bibtex_is_balanced():
    shorts = set()
    for key, reference in REFERENCES.items():
        assert reference.key == key and reference.authors and reference.title and 2000 < reference.year < 2100
        assert reference.short not in shorts, f"two papers share the short form {reference.short!r}"
        shorts.add(reference.short)
        assert not reference.arxiv or re.fullmatch(r"\d{4}\.\d{4,5}", reference.arxiv)
        bibtex = reference.bibtex()
        assert bibtex.startswith(f"@{reference.entry_type}{{{key},") and bibtex.count("{") == bibtex.count("}")
        assert str(reference.year) in reference.citation() and reference.title in reference.citation()


def test_cite_gives_the_short_form_and_refuses_unknown_keys():
    assert cite("wang2025nuclr", "Table 1") == "Wang et al. 2025, Table 1"
    assert cite("nozawa2021negatives") == "Nozawa & Sato 2021"
    with pytest.raises(KeyError, match="unknown reference"):
        cite("seed000")


def test_docs_references_page_is_written_from_the_module():
    result = subprocess.run(
        [sys.executable, str(ROOT / "scripts" / "write_references.py"), "--check"], capture_output=True, text=True
    )
    assert result.returncode == 0, result.stderr
    page = (ROOT / "docs" / "references.md").read_text(encoding="utf-8")
    for key in REFERENCES:
        assert f'<a id="{key}"></a>' in page and f"{{{key}," in page


def test_docs_links_to_references_point_at_entries():
    anchors = set(REFERENCES)
    for page in (ROOT / "docs").glob("*.md"):
        for anchor in re.findall(r"references\.md#([\w-]+)", page.read_text(encoding="utf-8")):
            assert anchor in anchors, f"{page.name} links to a missing reference {anchor!r}"


def test_objectives_command_prints_each_citation(capsys):
    from uncurated.cli import main

    assert main(["objectives"]) == 0
    out = capsys.readouterr().out
    for spec in objectives.available():
        for reference in spec.papers:
            assert reference.citation() in out
