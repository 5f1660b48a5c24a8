"""The subcommands of ``uncurated``, one module each, and how a module becomes a subcommand.

A command module states its ``NAME``, ``HELP`` and ``DESCRIPTION`` (and, where
it has them, ``EPILOG`` and ``FORMATTER``), adds its options in
``add_arguments(parser)`` and runs in ``run(args)``; :func:`add_command`
registers it. ``cli.py`` only lists the modules. They are the top layer:
they may read runs through :mod:`uncurated.train` and write files; the
library below never imports them.
"""

from __future__ import annotations

import argparse
from types import ModuleType


def add_command(subcommands: argparse._SubParsersAction, module: ModuleType) -> argparse.ArgumentParser:
    """Register the command ``module`` under ``subcommands``; its ``run`` (if any) answers its arguments."""
    parser = subcommands.add_parser(
        module.NAME,
        help=module.HELP,
        description=module.DESCRIPTION,
        epilog=getattr(module, "EPILOG", None),
        formatter_class=getattr(module, "FORMATTER", argparse.HelpFormatter),
    )
    if hasattr(module, "add_arguments"):
        module.add_arguments(parser)
    if hasattr(module, "run"):
        parser.set_defaults(run=module.run, parser=parser)
    return parser
