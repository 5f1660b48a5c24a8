"""The package's imports form no cycle, counting every import, and no two parts import each other.

`lint-imports` (pyproject.toml) holds the order of the parts and of the tiled engine's floors; a cycle among the
modules of one layer passes its layers contracts, so this reads every import with ``ast`` (tests/import_graph.py).
"""

from __future__ import annotations

import textwrap

from import_graph import import_graph, module_cycles, part_arrows, part_pairs


def test_no_module_imports_itself_through_others():
    cycles = module_cycles(import_graph())
    assert not cycles, "import cycles (every import counts, TYPE_CHECKING and function-level ones included):\n" + (
        "\n".join(", ".join(cycle) for cycle in cycles)
    )


def test_no_two_parts_import_each_other():
    graph = import_graph()
    arrows = part_arrows(graph)
    pairs = part_pairs(graph)
    assert not pairs, "\n".join(f"{a} <-> {b}: {arrows[(a, b)]} / {arrows[(b, a)]}" for a, b in pairs)


def _package(root, files: dict[str, str]):
    for name, text in files.items():
        path = root / "pkg" / name
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(textwrap.dedent(text))
    return import_graph(root, "pkg")


def test_the_checker_counts_type_checking_and_function_level_imports(tmp_path):
    graph = _package(
        tmp_path,
        {
            "__init__.py": "",
            "low/__init__.py": "",
            "low/leaf.py": """
                from typing import TYPE_CHECKING
                if TYPE_CHECKING:
                    from .top import Thing
            """,
            "low/top.py": """
                def make():
                    from . import leaf
                    from ..high.user import use
            """,
            "high/__init__.py": "from .user import use",
            "high/user.py": "import pkg.low.top\nfrom ..low import leaf\ndef use(): pass",
        },
    )
    assert graph["pkg.low.leaf"] == {"pkg.low.top"}
    assert graph["pkg.low.top"] == {"pkg.low.leaf", "pkg.high.user"}
    assert graph["pkg.high"] == {"pkg.high.user"}
    assert module_cycles(graph) == [["pkg.high.user", "pkg.low.leaf", "pkg.low.top"]]
    assert part_pairs(graph) == [("high", "low")]


def test_the_checker_passes_a_package_that_imports_down_only(tmp_path):
    graph = _package(
        tmp_path,
        {
            "__init__.py": "",
            "low/__init__.py": "from .leaf import x",
            "low/leaf.py": "x = 1",
            "high/__init__.py": "",
            "high/user.py": "from ..low import x\nfrom pkg.low.leaf import x as y",
        },
    )
    assert graph["pkg.high.user"] == {"pkg.low", "pkg.low.leaf"}
    assert module_cycles(graph) == [] and part_pairs(graph) == []
