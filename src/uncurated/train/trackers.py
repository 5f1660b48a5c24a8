"""Where a run's metrics go besides ``metrics.csv``: the experiment trackers ``report_to`` names.

``report_to`` is a comma-separated list of :data:`TRACKERS` (``none``, the default, writes ``metrics.csv`` alone):

* ``tensorboard``: TensorBoard event files in the run's ``tensorboard/`` folder (``torch.utils.tensorboard``; the
  ``tensorboard`` extra). A resumed run purges the events past the step it continues from.
* ``wandb``: a Weights & Biases run in offline mode, always (nothing is sent; ``wandb sync`` uploads it later),
  under the run folder's ``wandb/``, named after the run, with its configuration; its id is the run's own, kept
  when the run resumes (the ``wandb`` extra).

A tracker that is not installed is refused, naming ``report_to`` and the extra to install, before the run writes
anything (:func:`check_trackers`).
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from ..extras import require

#: The accepted items of ``report_to``.
TRACKERS = ("none", "tensorboard", "wandb")
#: The module each tracker imports; the extra of pyproject.toml that installs it has the tracker's name.
TRACKER_MODULES = {"tensorboard": "torch.utils.tensorboard", "wandb": "wandb"}


class Tracker(Protocol):
    """What a tracker does with the rows of ``metrics.csv``."""

    def log(self, values: dict[str, float], step: int) -> None: ...

    def close(self) -> None: ...


def tracker_names(report_to: str) -> tuple[str, ...]:
    """The trackers ``report_to`` names (``none``: none); ``ValueError`` naming the key for an unknown, repeated or
    empty item, or ``none`` beside a tracker."""
    names = tuple(item.strip() for item in report_to.split(","))
    unknown = [name for name in names if name not in TRACKERS]
    if unknown:
        raise ValueError(f"report_to: {unknown[0]!r} is not a tracker; give one or more of {', '.join(TRACKERS)}")
    if len(set(names)) != len(names):
        raise ValueError(f"report_to={report_to} names a tracker twice")
    if "none" in names and len(names) > 1:
        raise ValueError(f"report_to={report_to}: none means no tracker, and cannot go with one")
    return tuple(name for name in names if name != "none")


def check_trackers(report_to: str) -> None:
    """Import every tracker ``report_to`` names: a missing one raises
    :class:`~uncurated.extras.MissingExtraError` naming the key and ``pip install 'uncurated[EXTRA]'``."""
    for name in tracker_names(report_to):
        require(TRACKER_MODULES[name], name, f"report_to={name}")


def open_trackers(report_to: str, run_dir: Path, config: dict[str, Any], run_id: str, resume_step: int | None):
    """The trackers ``report_to`` names, writing into ``run_dir``; ``resume_step``: the step a resumed run
    continues from (``None``: a new run)."""
    opened: list[Tracker] = []
    for name in tracker_names(report_to):
        if name == "tensorboard":
            opened.append(TensorBoardTracker(run_dir / "tensorboard", resume_step))
        else:
            opened.append(WandbTracker(run_dir, config, run_id))
    return opened


class TensorBoardTracker:
    """Each value a scalar of its own name, at the row's step."""

    def __init__(self, folder: Path, resume_step: int | None) -> None:
        tensorboard = require(TRACKER_MODULES["tensorboard"], "tensorboard", "report_to=tensorboard")
        # purge_step: the events a killed run wrote past its checkpoint are dropped, as metrics.csv's rows are.
        self.writer = tensorboard.SummaryWriter(
            str(folder), purge_step=None if resume_step is None else resume_step + 1
        )

    def log(self, values: dict[str, float], step: int) -> None:
        for key, value in values.items():
            self.writer.add_scalar(key, value, step)
        self.writer.flush()

    def close(self) -> None:
        self.writer.close()


class WandbTracker:
    """A Weights & Biases run in offline mode (``mode="offline"``, whatever ``WANDB_MODE`` says)."""

    def __init__(self, run_dir: Path, config: dict[str, Any], run_id: str) -> None:
        wandb = require(TRACKER_MODULES["wandb"], "wandb", "report_to=wandb")
        self.run = wandb.init(
            mode="offline", dir=str(run_dir), name=run_dir.name, id=run_id, resume="allow", config=config
        )

    def log(self, values: dict[str, float], step: int) -> None:
        self.run.log(values, step=step)

    def close(self) -> None:
        self.run.finish()
