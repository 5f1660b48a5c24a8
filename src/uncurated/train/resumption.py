"""How a :class:`~uncurated.train.trainer.Trainer` continues a run from its latest checkpoint.

Everything the checkpoint saved comes back: the weights (whole, or each process's shards), the optimizer, the
schedule, the objective's state (each process reads the rows it holds now, whatever the number of processes that
wrote them), the position, the non-finite and skipped-item counts, every process's random generators, and the
seconds trained so far. A configuration or dataset size the saved state depends on that changed is refused
with a :class:`~uncurated.train.config.ConfigError` naming the keys.
"""

from __future__ import annotations

import pickle
import sys
from dataclasses import dataclass
from pathlib import Path

import torch
from torch import nn

from ..data import SkipCounts
from . import random_state
from .builders import TrainingParts, dataset_size
from .checkpoint import (
    MODEL_EXTRA,
    CheckpointError,
    checkpoint_metadata,
    checkpoint_run,
    latest_checkpoint,
    load_objective_state,
    read_checkpoint,
    read_training_state,
    sharded_weights,
)
from .config import ConfigError, TrainConfig, resume_conflicts
from .distributed import Distributed
from .file_hashes import hashing_once
from .parallel import load_shards, load_whole_model_state, load_whole_optimizer_state
from .skipped_items import SkippedItems


@dataclass
class Position:
    """Where a run is: the next batch to train on, and how many steps are done."""

    epoch: int = 0
    batch: int = 0
    step: int = 0


class Resuming:
    """The :class:`~uncurated.train.trainer.Trainer`'s resumption (its attributes are the trainer's)."""

    config: TrainConfig
    parts: TrainingParts
    context: Distributed
    run_dir: Path
    checkpoints: Path
    optimized: nn.ModuleDict
    optimizer: torch.optim.Optimizer
    scheduler: torch.optim.lr_scheduler.LRScheduler
    sharded: bool
    position: Position
    nonfinite: dict[str, int]
    skipped: SkippedItems
    run_id: str
    last_checkpoint: Path | None
    saved_position: Position | None
    seconds_before: float

    def resume(self) -> bool:
        """Continue from the latest checkpoint of the run, if there is one; return whether there was.

        Raises :class:`ConfigError` when the checkpoint was written under a
        configuration or dataset size its state depends on and this run changed,
        and :class:`CheckpointError` when its state cannot be used (an objective
        file whose rows or sizes are not its process's, a file of another run
        or step): on every process.
        """
        context = self.context
        with hashing_once():  # the main process hashes every file to choose, then loads them without again
            # Chosen once, by the main process, and handed to the others, which verify only what they load.
            chosen = context.everywhere(lambda: latest_checkpoint(self.checkpoints) if context.is_main else None)
            folder = context.broadcast_object(chosen)
            if folder is None:
                return False
            context.everywhere(lambda: self._resume_from(folder))
        self.run_id = checkpoint_run(folder) or self.run_id
        self.last_checkpoint = folder
        self.saved_position = Position(**vars(self.position))
        self.seconds_before = float(checkpoint_metadata(folder).get("train_seconds", 0.0))
        return True

    def _resume_from(self, folder: Path) -> None:
        self._check_resumable(folder)
        shards = sharded_weights(folder)
        if shards is None:
            model, state = read_checkpoint(folder)
            load_whole_model_state(self.parts.model, model, self.sharded)
        else:  # written by parallel=fsdp: each process reads its own shards, whatever their number was
            state = read_training_state(folder, with_shards=True)
            groups = state["optimizer"]["param_groups"]
            try:
                load_shards(shards, self.parts.model, state.pop(MODEL_EXTRA), (self.optimized, self.optimizer, groups))
            except (KeyError, TypeError, ValueError, RuntimeError, pickle.UnpicklingError) as error:
                raise CheckpointError(
                    f"checkpoint {folder} holds shards this run cannot use ({type(error).__name__}: {error})"
                ) from error
        try:
            load_objective_state(folder, self.parts.objective, state)
            self._restore(state)
        except (KeyError, TypeError, ValueError, RuntimeError) as error:
            raise CheckpointError(
                f"checkpoint {folder} holds a training state this run cannot use ({type(error).__name__}: {error})"
            ) from error

    def _restore(self, state: dict) -> None:
        """Set the optimizer, schedule, objective, generators, position and counts from :meth:`state`'s values.

        Each process continues its own generators and skipped-item counts when the checkpoint was written by as
        many processes. Under another number, the saved ones belong to processes that read other shares: each
        process seeds its generators from ``process_seed(seed, rank, step)`` and counts the epoch's unreadable
        items afresh from the resumed batch on.
        """
        if not state["optimizer"].get("sharded"):  # sharded, loaded with the weights' shards
            load_whole_optimizer_state(self.optimized, self.optimizer, state["optimizer"], self.sharded)
        self.scheduler.load_state_dict(state["scheduler"])
        self.position = Position(**state["position"])
        self.nonfinite = state["nonfinite"]
        self.skipped.load_state_dict(state.get("skipped_items", []))  # none before the runs kept them
        # Checkpoints of formats 2 and 3 hold the main process's generators and counts only.
        ranks = state["ranks"] if "ranks" in state else [{"rng": state["rng"], "epoch_skips": state["epoch_skips"]}]
        context = self.context
        if len(ranks) != context.world_size:
            random_state.seed_everything(random_state.process_seed(self.config.seed, context.rank, self.position.step))
            if context.is_main:
                print(
                    f"the checkpoint holds the random generators of {len(ranks)} processes, this run has "
                    f"{context.world_size}: each process seeds its own from (seed, rank, step) and counts this "
                    "epoch's unreadable items afresh",
                    file=sys.stderr,
                    flush=True,
                )
            return
        own = ranks[context.rank]
        random_state.restore(own["rng"])
        if own["epoch_skips"] is not None:
            self.skipped.epoch = SkipCounts.from_state_dict(own["epoch_skips"])

    def _check_resumable(self, folder: Path) -> None:
        saved = checkpoint_metadata(folder)
        conflicts = resume_conflicts(saved.get("config", {}), self.config)
        size = dataset_size(self.parts.dataset)
        if saved.get("dataset_size", size) != size:
            conflicts.append(f"the dataset size: {saved['dataset_size']} -> {size}")
        if conflicts:
            raise ConfigError(
                f"cannot resume {self.run_dir} from {folder.name}: the saved state depends on what changed since "
                "it was written:\n  " + "\n  ".join(conflicts) + "\nresume with the saved values, or start a new "
                "run (name=...)"
            )
