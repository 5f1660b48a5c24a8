"""``uncurated train``: pretrain an encoder as a preset says, with ``key=value`` overrides, then evaluate."""

from __future__ import annotations

import argparse

NAME = "train"
HELP = "pretrain an encoder with any objective (two views or image-text), resumable"
DESCRIPTION = (
    "Train as a preset says, with key=value overrides, then evaluate: a linear probe (next to raw\n"
    "pixels and an untrained model), kNN and the mean classifier; for image-text also zero-shot\n"
    "accuracy and retrieval recall (`uncurated eval RUN` adds margins and plots). Under torchrun\n"
    "(torchrun --nproc_per_node=N -m uncurated train ...) the processes share each batch: each\n"
    "scores its share against the whole batch and holds its share of the per-sample state, with\n"
    "DistributedDataParallel (parallel=ddp) or FSDP2 (parallel=fsdp) for the towers.\n\n"
    "  uncurated train                                   # the default preset: fashion-mnist (DCL)\n"
    "  uncurated train preset=fashion-captions objective=clip\n"
    "  uncurated train objective=hcl objective.beta=0.5 epochs=2 batch_size=512\n"
    "  uncurated train batch_size=4096 micro_batch_size=256  # one micro-batch in memory (batch norm: per part)\n"
    "  uncurated train name=my-run resume=true           # continue a killed run"
)
FORMATTER = argparse.RawDescriptionHelpFormatter
#: The exit status of a run stopped at once by Ctrl-C (the shell's 128 + SIGINT); a stop at a step boundary exits 0.
INTERRUPTED = 130


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..train.config import FIELDS, PRESETS_DIR

    presets = ", ".join(sorted(path.stem for path in PRESETS_DIR.glob("*.yaml")))
    keys = ", ".join(name for name in FIELDS if name != "objective_params")
    parser.epilog = (
        f"presets: {presets}\nkeys: {keys}\nobjective parameters: objective.NAME=VALUE "
        "(see `uncurated objectives`); objective=clip and objective=simclr are InfoNCE across modalities "
        "and over two views"
    )
    parser.add_argument("overrides", nargs="*", metavar="key=value", help="configuration overrides")


def run(args: argparse.Namespace) -> int:
    from ..train.distributed import end_training_process

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


def _train(parser: argparse.ArgumentParser, overrides: list[str]) -> None:
    """Train; a run that stops exits with its :class:`~uncurated.errors.RunStopped`'s status (2: the
    configuration, ``error:``; 1: a fault met while training, ``stopped:``, whose last checkpoint is intact)."""
    from ..errors import RunStopped
    from ..train.config import load_config
    from ..train.run import train

    try:
        train(load_config(overrides))
    except RunStopped as stop:
        parser.exit(stop.exit_status, f"{parser.prog}: {stop.verdict}: {stop}\n")
