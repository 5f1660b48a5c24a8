"""The ``uncurated`` command: the parser of every subcommand, each of which lives in :mod:`uncurated.commands`.

Run ``uncurated --help`` for the subcommands and ``uncurated COMMAND --help``
for the options of each.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

from . import __version__
from .commands import add_command, bench, bound, debias, demo, evaluate, objectives, toys, train
from .extras import MissingExtraError
from .progress import is_terminal, silence_third_party_progress

#: The subcommands in the order ``uncurated --help`` lists them.
COMMANDS = (objectives, demo, train, debias, evaluate, bench, bound, toys)


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    Usage errors, a missing dataset and a missing optional dependency (naming the extra that installs it) exit with
    status 2 through ``SystemExit``.
    """
    parser = build_parser()
    args = parser.parse_args(_rewritten(list(sys.argv[1:] if argv is None else argv)))
    if not is_terminal(sys.stderr):  # a log keeps every frame of a bar: other libraries' bars stay off
        silence_third_party_progress()
    try:
        return args.run(args)
    except MissingExtraError as error:
        parser.exit(2, f"uncurated {args.command}: error: {error}\n")


def _rewritten(arguments: list[str]) -> list[str]:
    """``arguments`` as the command they name rewrites them (``rewrite_arguments``: ``train``'s ``--key value``)."""
    for command in COMMANDS:
        if arguments[:1] == [command.NAME] and hasattr(command, "rewrite_arguments"):
            return [arguments[0], *command.rewrite_arguments(arguments[1:])]
    return arguments


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``uncurated`` and its subcommands; each subcommand sets ``run``."""
    parser = argparse.ArgumentParser(
        prog="uncurated",
        description="Contrastive representation learning from uncurated data.",
        epilog="Run `uncurated COMMAND --help` for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(title="commands", dest="command", required=True)
    for command in COMMANDS:
        add_command(commands, command)
    return parser
