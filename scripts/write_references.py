"""Write docs/references.md from uncurated.references, the one place the package keeps its citations.

python scripts/write_references.py            # rewrite docs/references.md
python scripts/write_references.py --check    # exit 1 when docs/references.md differs (the tests do the same)
"""

from __future__ import annotations

import argparse
import pathlib
import sys

from uncurated import objectives
from uncurated.references import CORE_PAPERS, REFERENCES, Reference

PAGE = pathlib.Path(__file__).resolve().parents[1] / "docs" / "references.md"

INTRO = """\
# References

The papers this package implements, with the short form the documentation, the `--help` texts, the
docstrings and the bench's claims use ("Wang et al. 2025, Table 1"). `uncurated objectives` prints each
objective's papers. To cite the software itself, use the `CITATION.cff` file at the root of the repository
(GitHub's "Cite this repository" reads it).

This page is written from `src/uncurated/references.py` by `python scripts/write_references.py`; edit the
module, not the page.
"""


def implemented_by(key: str) -> list[str]:
    """The objectives that name ``key`` among their papers."""
    return [f"`{spec.name}`" for spec in objectives.available() if key in spec.cls.papers]


def entry(reference: Reference) -> str:
    heading = f"### {reference.short}" + (f": {reference.label}" if reference.label else "")
    lines = [f'<a id="{reference.key}"></a>', "", heading, "", reference.citation(), ""]
    names = implemented_by(reference.key)
    if names:
        lines.append("- objectives: " + ", ".join(names))
    if reference.used_in:
        lines.append(f"- in this package: {reference.used_in}")
    if reference.arxiv:
        lines.append(f"- paper: <{reference.arxiv_url}>")
    if reference.code:
        lines.append(f"- the authors' code: <{reference.code}>")
    lines += ["", "```bibtex", reference.bibtex(), "```", ""]
    return "\n".join(lines)


def page() -> str:
    core = [REFERENCES[key] for key in CORE_PAPERS]
    others = [reference for key, reference in REFERENCES.items() if key not in CORE_PAPERS]
    parts = [INTRO, "## The five papers the package is built on\n"]
    parts += [entry(reference) for reference in core]
    parts.append("## The other methods and results it implements\n")
    parts += [entry(reference) for reference in others]
    return "\n".join(parts).rstrip() + "\n"


def main() -> int:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--check", action="store_true", help="exit 1 when docs/references.md is not up to date")
    args = parser.parse_args()
    text = page()
    if args.check:
        if PAGE.read_text(encoding="utf-8") != text:
            print(f"{PAGE} is out of date: run python scripts/write_references.py", file=sys.stderr)
            return 1
        return 0
    PAGE.write_text(text, encoding="utf-8")
    return 0


if __name__ == "__main__":
    sys.exit(main())
