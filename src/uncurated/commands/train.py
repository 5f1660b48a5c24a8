"""``uncurated train``: pretrain an encoder as a preset says, with ``key=value`` overrides, then evaluate."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

NAME = "train"
HELP = "pretrain an encoder with any objective (two views or image-text), resumable"
DESCRIPTION = (
    "Train as a preset says, with key=value overrides, then evaluate: a linear probe (next to raw\n"
    "pixels and an untrained model, with the learning gate: 2 points over both), kNN and the mean\n"
    "classifier; for image-text also zero-shot accuracy and retrieval recall (`uncurated eval RUN`\n"
    "adds margins and plots). A dataset other than the preset's takes its own defaults, an objective\n"
    "other than the preset's its paper's parameters; the run's start says so in `note:` lines. Under\n"
    "torchrun (torchrun --nproc_per_node=N -m uncurated train ...) the processes share each batch.\n\n"
    "  uncurated train                                   # the default preset: fashion-clutter (DCL)\n"
    "  uncurated train preset=fashion-captions objective=clip\n"
    "  uncurated train dataset=csv data_dir=train.csv csv_caption_key=caption objective=siglip\n"
    "  uncurated train objective=hcl objective.beta=0.5 --epochs 2 batch_size=512 name=hcl-run\n"
    "  uncurated train name=hcl-run resume=true          # continue it from its config.yaml and checkpoint\n"
    "  uncurated train --dry-run preset=digits           # print the resolved configuration, train nothing"
)
FORMATTER = argparse.RawDescriptionHelpFormatter
#: The exit status of a run stopped at once by Ctrl-C (the shell's 128 + SIGINT); a stop at a step boundary exits 0.
INTERRUPTED = 130

#: The options of the command itself; every other ``--KEY VALUE`` or ``--KEY=VALUE`` is the key ``KEY=VALUE``.
OPTIONS = ("-h", "--help", "--dry-run")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..train.config import PRESETS_DIR

    presets = ", ".join(sorted(path.stem for path in PRESETS_DIR.glob("*.yaml")))
    parser.epilog = (
        f"presets: {presets}\n\n"
        "keys (key=value or --key value; each key's own default: a preset sets many, `--dry-run` shows the run's):\n"
        + key_table()
        + "\n\nobjective parameters: objective.NAME=VALUE (see `uncurated objectives`: each objective's defaults are "
        "its paper's);\nobjective=clip and objective=simclr are InfoNCE across modalities (learnable t from 0.07) "
        "and over two views\n(t = 0.07, CLIP's: SimCLR's paper used 0.5 on CIFAR-10 and 0.1 on ImageNet)"
    )
    parser.add_argument("--dry-run", action="store_true", help="print the resolved configuration (YAML) and exit")
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="configuration overrides")


def rewrite_arguments(arguments: Sequence[str]) -> list[str]:
    """``arguments`` with ``--KEY VALUE`` and ``--KEY=VALUE`` written ``KEY=VALUE`` where ``KEY`` (dashes read as
    underscores) is a configuration key or ``objective.NAME``-like; the command's own options and anything else
    stay as given (argparse answers those)."""
    from ..train.config import FIELDS, PREFIXED_MAPPINGS

    rewritten: list[str] = []
    items = iter(arguments)
    for item in items:
        key, equals, value = item[2:].partition("=")
        key = key.replace("-", "_") if key.replace("-", "_") in FIELDS else key
        is_key = key in FIELDS or key.startswith(tuple(PREFIXED_MAPPINGS))
        if not item.startswith("--") or item in OPTIONS or item == "--" or not is_key:
            rewritten.append(item)
        elif equals:
            rewritten.append(f"{key}={value}")
        else:
            rewritten.append(f"{key}={next(items, '')}")
    return rewritten


def key_table() -> str:
    """Every key by section: its type, its default, what it accepts, and one line of meaning."""
    from ..train.config import RULES, SECTIONS

    lines = []
    for section, keys in SECTIONS.items():
        lines.append(f"\n{section}:")
        for key in keys:
            lines.append(f"  {key} ({_key_summary(key)})")
            lines.append(f"      {RULES[key].meaning}")
    return "\n".join(lines)


def _key_summary(key: str) -> str:
    from ..train.config import FIELDS, accepted
    from ..train.setting import default_of

    return f"{accepted(key)}; default {default_of(FIELDS[key])!r}"


def run(args: argparse.Namespace) -> int:
    from ..train.distributed import end_training_process

    if args.dry_run:
        return _dry_run(args.parser, args.overrides)
    try:
        _train(args.parser, args.overrides)
    except SystemExit as stop:
        end_training_process(stop.code)
        raise
    except KeyboardInterrupt:  # Ctrl-C outside the training steps (which stop at a step boundary), or twice
        end_training_process(INTERRUPTED)
        args.parser.exit(
            INTERRUPTED, f"{args.parser.prog}: interrupted: the last checkpoint is intact; resume=true continues\n"
        )
    end_training_process(0)
    return 0


def _dry_run(parser: argparse.ArgumentParser, overrides: list[str]) -> int:
    """Print the configuration the run would train with (YAML, on stdout) and its notes; write nothing."""
    import yaml

    from ..errors import RunStopped
    from ..train.config import resolve_config
    from ..train.presets import paper_notes
    from ..train.run import check_device

    try:
        config, notes = resolve_config(overrides)
        check_device(config.device)
    except RunStopped as stop:
        parser.exit(stop.exit_status, f"{parser.prog}: {stop.verdict}: {stop}\n")
    for note in [*notes, *paper_notes(config)]:
        print(note, file=sys.stderr)
    print(yaml.safe_dump(config.to_dict(), sort_keys=False), end="")
    return 0


def _train(parser: argparse.ArgumentParser, overrides: list[str]) -> None:
    """Train; a run that stops exits with its :class:`~uncurated.errors.RunStopped`'s status (2: the
    configuration, ``error:``; 1: a fault met while training, ``stopped:``, whose last checkpoint is intact)."""
    from ..errors import RunStopped
    from ..train.config import resolve_config
    from ..train.run import train

    try:
        config, notes = resolve_config(overrides)
        train(config, notes)
    except RunStopped as stop:
        parser.exit(stop.exit_status, f"{parser.prog}: {stop.verdict}: {stop}\n")
