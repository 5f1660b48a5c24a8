"""Subcommands of ``uncurated`` that live in their own modules: each has ``add_parser(commands)``."""
