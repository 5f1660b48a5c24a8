"""Evaluation while a run trains: every ``eval_every`` epochs, the run's evaluation as at its end, kept by epoch.

After every ``eval_every``-th epoch but the last (the end of the run evaluates that one), the main process measures
the model as the end of the run does (:func:`~uncurated.train.evaluation.evaluate` on the test split, and the
real sets of ``zero_shot_dir`` and ``retrieval_file``) but for the baselines, which training does not change and
the end measures once. The headline numbers (:func:`headline_numbers`) go into ``metrics.csv`` as a row of their own
(``step``, ``epoch`` and ``eval_*`` columns, the loss empty), to the trackers, and into ``report.json``'s
``evaluations`` with the end's. The generators are put back as they were and the model back into training mode,
so that a run evaluated along the way trains the same weights as one that is not. Under ``torchrun`` every process
calls it at the same epoch's end (under FSDP2 every process gathers the weights for the main one's copy), and the
others wait at their next step until the main process is done (at most ``dist_timeout`` seconds).
"""

from __future__ import annotations

import re
from collections.abc import Callable
from pathlib import Path

from torch import nn

from . import random_state
from .metrics import EVALUATION_PREFIX, MetricsLog, read_metrics

#: The measurements that make an evaluation row: accuracies and Recall@K, by their names in the results.
HEADLINE = re.compile(r".*accuracy|.*_r\d+")


def headline_numbers(results: dict, prefix: str = EVALUATION_PREFIX) -> dict[str, float]:
    """Every accuracy and Recall@K of an evaluation's ``results``, flattened to ``eval_PATH_NAME`` columns
    (``eval_linear_probe_accuracy``, ``eval_retrieval_image_to_text_r1``)."""
    numbers = {}
    for key, value in results.items():
        if isinstance(value, dict):
            numbers.update(headline_numbers(value, f"{prefix}{key}_"))
        elif isinstance(value, int | float) and not isinstance(value, bool) and HEADLINE.fullmatch(key):
            numbers[f"{prefix}{key}"] = float(value)
    return numbers


def evaluation_row(results: dict, epoch: float, step: int) -> dict[str, float]:
    """The ``metrics.csv`` row of an evaluation at ``step``, after ``epoch`` epochs."""
    return {"step": step, "epoch": epoch, **headline_numbers(results)}


def recorded_evaluations(path: Path) -> list[dict[str, float]]:
    """The evaluation rows of a ``metrics.csv``, in order: ``step``, ``epoch`` and their numbers."""
    found = []
    for row in read_metrics(path):
        numbers = {key: float(value) for key, value in row.items() if key.startswith(EVALUATION_PREFIX) and value}
        if numbers:
            found.append({"step": int(row["step"]), "epoch": float(row["epoch"]), **numbers})
    return found


class PeriodicEvaluation:
    """Called at the end of each epoch (:attr:`~uncurated.train.trainer.Trainer.epoch_end`): every ``every``
    epochs, ``measure()`` (the results on the main process, ``None`` on the others) into the log and ``say``."""

    def __init__(
        self, every: int, measure: Callable[[], dict | None], model: nn.Module, say: Callable[[str], None]
    ) -> None:
        self.every = every
        self.measure = measure
        self.model = model
        self.say = say

    def __call__(self, epoch: float, step: int, log: MetricsLog | None) -> None:
        if not self.every or round(epoch) % self.every:
            return
        self.say(f"evaluating at epoch {epoch:g} (step {step}) ...")
        generators = random_state.capture()
        try:
            results = self.measure()
        finally:
            random_state.restore(generators)
            self.model.train()
        if log is not None and results is not None:
            log.write(evaluation_row(results, epoch, step))
            numbers = headline_numbers(results, prefix="")
            self.say(f"epoch {epoch:g}: " + ", ".join(f"{key} {value:.4f}" for key, value in numbers.items()))
