"""import-linter contract types of this project's own (``contract_types`` in pyproject.toml's ``[tool.importlinter]``).

:class:`OnlyImportersContract`: only the named modules import a *submodule* of
an external package, e.g. ``torch.distributed`` (import-linter's ``forbidden``
contract forbids an external package only as a whole, ``torch``, not one of
its submodules). lint-imports runs from the repository root, which it puts on
``sys.path``, so this module is found as ``scripts.import_contracts``.
"""

from __future__ import annotations

import re

from grimp import ImportGraph
from importlinter import Contract, ContractCheck, fields, output


class OnlyImportersContract(Contract):
    """Only ``importers`` (and the modules inside them) import ``module``, a submodule of an external package.

    The import graph holds an external package as its top-level name alone,
    so each import of that package is read from its line: ``import
    torch.distributed``, ``from torch.distributed.fsdp import ...`` and ``from
    torch import distributed`` all import ``torch.distributed``. An attribute
    reached through the package (``torch.distributed.barrier()`` after ``import
    torch``) is not an import, and is not seen.

    Options: ``module`` (e.g. ``torch.distributed``), ``importers`` (module
    names of the root package), ``ignore_imports`` (``importer -> module``
    pairs, each a module of the root package allowed one by one).
    """

    module = fields.StringField()
    importers = fields.ListField(subfield=fields.StringField())

    def check(self, graph: ImportGraph, verbose: bool) -> ContractCheck:
        package, _, rest = self.module.partition(".")
        if not rest:
            raise ValueError(f"module must name a submodule of an external package, got {self.module!r}")
        parent, _, last = self.module.rpartition(".")
        pattern = re.compile(
            rf"(^|\s)(import|from)\s+{re.escape(self.module)}(\.|\s|$)"
            rf"|^\s*from\s+{re.escape(parent)}\s+import\s+(.*[\s,(])?{re.escape(last)}(\s|,|\)|$)"
        )
        found = []
        for importer in sorted(graph.find_modules_that_directly_import(package)):
            if self._allowed(importer):
                continue
            for detail in graph.get_import_details(importer=importer, imported=package):
                if pattern.search(detail["line_contents"]):
                    found.append((importer, detail["line_number"], detail["line_contents"]))
        return ContractCheck(kept=not found, metadata={"found": found})

    def _allowed(self, importer: str) -> bool:
        return any(importer == name or importer.startswith(name + ".") for name in self.importers)

    def render_broken_contract(self, check: ContractCheck) -> None:
        output.print_error(f"{self.module} is imported outside {', '.join(self.importers)}:")
        output.new_line()
        for importer, line, contents in check.metadata["found"]:
            output.print_error(f"- {importer}:{line}: {contents}", bold=False)
        output.new_line()
