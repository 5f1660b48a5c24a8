"""What each process of ``uncurated train`` draws and reads, step by step, recorded for the rank-stream tests.

Under ``torchrun`` (``python rank_streams.py OUT [--constant-images] KEY=VALUE ...``) every process runs
:func:`uncurated.train.train` on the configuration ``KEY=VALUE ...`` and writes ``OUT/rank{r}.pt``: for every
training step, its position (``step``, ``epoch``, ``batch``), the dataset indices of its share, every view the
augmentation drew and, for WPSE (``point_sets=true``), the frequencies of every random-feature draw.
``--constant-images`` makes every training image the first one, so that the views differ by their random draws
alone. A process killed by the checkpoint fault hook writes nothing.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path

import torch

import uncurated.train.run as run
from uncurated.similarity import wpse
from uncurated.train import load_config
from uncurated.train.distributed import end_training_process
from uncurated.train.trainer import Trainer

STEPS: list[dict] = []


def record_steps() -> None:
    """Each step's position and indices, and what the augmentation and WPSE drew during it."""
    step = Trainer.step

    def recorded_step(self, batch):
        position = self.position
        STEPS.append({**vars(position), "index": batch["index"].clone(), "views": [], "draws": []})
        return step(self, batch)

    Trainer.step = recorded_step

    build_augmentation = run.build_augmentation

    def recording_augmentation(config):
        augment = build_augmentation(config)
        forward = augment.forward

        def recorded(images, *args, **kwargs):
            views = forward(images, *args, **kwargs)
            if STEPS:
                STEPS[-1]["views"].append(views.detach().clone())
            return views

        augment.forward = recorded
        return augment

    run.build_augmentation = recording_augmentation

    sample = wpse.FeatureDraw.sample.__func__

    def recorded_sample(cls, *args, **kwargs):
        draw = sample(cls, *args, **kwargs)
        if STEPS:
            STEPS[-1]["draws"].append(draw.frequencies.clone())
        return draw

    wpse.FeatureDraw.sample = classmethod(recorded_sample)


def constant_images() -> None:
    """Every training image replaced by the first one."""
    build_splits = run.build_splits

    def constant(config):
        splits = build_splits(config)
        splits.train.images[:] = splits.train.images[0]
        return splits

    run.build_splits = constant


def main(out: str, *arguments: str) -> None:
    if arguments and arguments[0] == "--constant-images":
        constant_images()
        arguments = arguments[1:]
    record_steps()
    run.evaluate = lambda *args, **kwargs: {}  # the tests read what training drew, not the evaluation
    try:
        run.train(load_config(list(arguments)))
    finally:
        torch.save(STEPS, Path(out) / f"rank{os.environ.get('RANK', '0')}.pt")
    end_training_process(0)


if __name__ == "__main__":
    main(*sys.argv[1:])
