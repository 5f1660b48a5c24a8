"""The package's imports as a graph, read from the source with ``ast``: every import counts, those under
``if TYPE_CHECKING:`` and those inside functions included, relative imports resolved against their package.

import-linter's layers contracts hold the order between the package's parts and the tiled engine's floors; they do
not see a cycle among modules of one layer. This module finds those: ``module_cycles`` gives the strongly
connected components of the module graph, ``part_pairs`` the parts (sub-packages of ``uncurated``) that import
each other. ``python tests/import_graph.py [SOURCE]`` prints both, and how many arrows inside the tiled engine
close a cycle.
"""

from __future__ import annotations

import ast
import pathlib
import sys
from collections.abc import Iterator

ROOT = pathlib.Path(__file__).resolve().parents[1]
SOURCE = ROOT / "src"
PACKAGE = "uncurated"


def module_name(path: pathlib.Path, source: pathlib.Path = SOURCE) -> str:
    parts = list(path.relative_to(source).with_suffix("").parts)
    if parts[-1] == "__init__":
        parts.pop()
    return ".".join(parts)


def _resolve(node: ast.ImportFrom, package: str) -> str:
    """The absolute name of the module that ``from ... import`` reads, ``package`` being the importer's package."""
    if not node.level:
        return node.module or ""
    parts = package.split(".")
    parts = parts[: len(parts) - (node.level - 1)]
    return ".".join(parts + ([node.module] if node.module else []))


def _imported(tree: ast.AST, package: str) -> Iterator[tuple[str, ...]]:
    """For each import in ``tree``, anywhere (under ``TYPE_CHECKING``, in functions), the dotted names it may mean,
    most specific first: ``from a import b`` means the module ``a.b`` if there is one, else the name ``b`` of ``a``."""
    for node in ast.walk(tree):
        if isinstance(node, ast.Import):
            yield from ((alias.name,) for alias in node.names)
        elif isinstance(node, ast.ImportFrom):
            base = _resolve(node, package)
            yield from ((f"{base}.{alias.name}", base) for alias in node.names)


def import_graph(source: pathlib.Path = SOURCE, package: str = PACKAGE) -> dict[str, set[str]]:
    """Each module of ``package`` and the modules of ``package`` it imports. ``import a.b.c`` and ``from a.b import
    c`` (``c`` a module) are an arrow to ``a.b.c`` alone: the interpreter runs the ``__init__`` of ``a`` and ``a.b``
    first, but they count only where the code takes a name from them."""
    modules = {module_name(path, source): path for path in sorted((source / package).rglob("*.py"))}
    graph: dict[str, set[str]] = {}
    for module, path in modules.items():
        tree = ast.parse(path.read_text(encoding="utf-8"), filename=str(path))
        own_package = module if path.name == "__init__.py" else module.rpartition(".")[0]
        targets = set()
        for meanings in _imported(tree, own_package):
            name = next((m for m in meanings if m in modules), meanings[-1])
            while name and name not in modules:
                name = name.rpartition(".")[0]
            if name and name != module:
                targets.add(name)
        graph[module] = targets
    return graph


def module_cycles(graph: dict[str, set[str]]) -> list[list[str]]:
    """The strongly connected components of more than one module (Tarjan), each sorted, largest first."""
    index: dict[str, int] = {}
    low: dict[str, int] = {}
    stack: list[str] = []
    on_stack: set[str] = set()
    components: list[list[str]] = []
    counter = 0

    def visit(start: str) -> None:
        nonlocal counter
        work = [(start, iter(sorted(graph.get(start, ()))))]
        index[start] = low[start] = counter
        counter += 1
        stack.append(start)
        on_stack.add(start)
        while work:
            node, children = work[-1]
            child = next(children, None)
            if child is not None:
                if child not in index:
                    index[child] = low[child] = counter
                    counter += 1
                    stack.append(child)
                    on_stack.add(child)
                    work.append((child, iter(sorted(graph.get(child, ())))))
                elif child in on_stack:
                    low[node] = min(low[node], index[child])
                continue
            work.pop()
            if work:
                low[work[-1][0]] = min(low[work[-1][0]], low[node])
            if low[node] == index[node]:
                component = []
                while True:
                    member = stack.pop()
                    on_stack.discard(member)
                    component.append(member)
                    if member == node:
                        break
                if len(component) > 1:
                    components.append(sorted(component))

    for node in sorted(graph):
        if node not in index:
            visit(node)
    return sorted(components, key=lambda c: (-len(c), c))


def part_of(module: str, packages: set[str]) -> str | None:
    """The part (sub-package of the root package) a module belongs to; None for the root's own modules."""
    parts = module.split(".")
    if len(parts) > 2 or (len(parts) == 2 and module in packages):
        return parts[1]
    return None


def part_arrows(graph: dict[str, set[str]]) -> dict[tuple[str, str], list[tuple[str, str]]]:
    """For each (part, other part) that ``part`` imports, the module arrows that make it."""
    packages = {module.rpartition(".")[0] for module in graph}
    arrows: dict[tuple[str, str], list[tuple[str, str]]] = {}
    for module, targets in sorted(graph.items()):
        for target in sorted(targets):
            a, b = part_of(module, packages), part_of(target, packages)
            if a and b and a != b:
                arrows.setdefault((a, b), []).append((module, target))
    return arrows


def part_pairs(graph: dict[str, set[str]]) -> list[tuple[str, str]]:
    """The pairs of parts that import each other, each once."""
    arrows = part_arrows(graph)
    return sorted((a, b) for a, b in arrows if a < b and (b, a) in arrows)


def main(source: pathlib.Path = SOURCE) -> int:
    graph = import_graph(source)
    cycles = module_cycles(graph)
    print(f"{len(graph)} modules, {sum(len(t) for t in graph.values())} arrows")
    print(f"{len(cycles)} module cycles")
    for cycle in cycles:
        print(f"  {len(cycle)}: {', '.join(cycle)}")
    arrows = part_arrows(graph)
    pairs = part_pairs(graph)
    print(f"{len(pairs)} pairs of parts importing each other")
    for a, b in pairs:
        print(f"  {a} <-> {b}: {arrows[(a, b)]} / {arrows[(b, a)]}")
    tiled = f"{PACKAGE}.objectives.tiled"
    inside = [(m, t) for m, targets in graph.items() for t in targets if m.startswith(tiled) and t.startswith(tiled)]
    cyclic = [(m, t) for m, t in inside if any(m in cycle and t in cycle for cycle in cycles)]
    print(f"{len(inside)} arrows inside {tiled}, {len(cyclic)} of them within a cycle")
    return 1 if cycles or pairs else 0


if __name__ == "__main__":
    sys.exit(main(pathlib.Path(sys.argv[1]) if len(sys.argv) > 1 else SOURCE))
