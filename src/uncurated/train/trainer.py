"""The training loop: any objective, two views or image-text, one process or several, resumable.

One step: load this rank's slice of the global batch, augment it on the
device, embed it, gather the embeddings (and dataset indices) of the global
batch from every rank, evaluate the objective, step AdamW under a warmup +
cosine schedule. The global objectives update their per-sample state inside
the objective call. Every ``checkpoint_every`` steps and at the end the
model, optimizer, schedule, objective state, random generators and data
position are checkpointed, so a killed run resumed with ``resume=true``
ends with the weights and state of an uninterrupted one.
"""

from __future__ import annotations

import math
import random
import sys
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import torch
from torch import Tensor, nn

from torch.utils.data import IterableDataset

from ..data import SkipReport
from ..objectives import StatefulObjective
from .batches import BatchPlan, load_batches, stream_batches
from .checkpoint import latest_checkpoint, load_checkpoint, save_checkpoint
from .config import ConfigError, TrainConfig
from .distributed import Distributed
from .metrics import MetricsLog
from .schedule import warmup_cosine

METRICS = ["step", "epoch", "loss", "lr", "temperature", "samples_per_second"]


@dataclass
class Position:
    """Where a run is: the next batch to train on, and how many steps are done."""

    epoch: int = 0
    batch: int = 0
    step: int = 0


@dataclass
class TrainingParts:
    """Everything the loop trains and reads, built from a configuration."""

    model: nn.Module
    objective: nn.Module
    dataset: object
    augment: nn.Module
    pipeline: str


def seed_everything(seed: int) -> None:
    random.seed(seed)
    np.random.seed(seed % 2**32)
    torch.manual_seed(seed)


class Trainer:
    """Runs the optimization of ``parts`` as ``config`` says, writing into ``run_dir``."""

    def __init__(self, config: TrainConfig, parts: TrainingParts, context: Distributed, run_dir: Path) -> None:
        self.config = config
        self.parts = parts
        self.context = context
        self.run_dir = run_dir
        self.streamed = isinstance(parts.dataset, IterableDataset)
        if self.streamed:
            if config.steps_per_epoch < 1:
                raise ConfigError("streamed data has no length: give steps_per_epoch=N (batches per pass)")
            self.steps_per_epoch = config.steps_per_epoch
        else:
            self.plan = BatchPlan(len(parts.dataset), config.batch_size, config.seed)
            self.steps_per_epoch = self.plan.steps_per_epoch
        self.total_steps = max(1, math.ceil(config.epochs * self.steps_per_epoch))
        self.optimizer = self._optimizer()
        warmup = round(config.warmup_epochs * self.steps_per_epoch)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: warmup_cosine(step, self.total_steps, warmup)
        )
        self.position = Position()
        self.checkpoints = run_dir / "checkpoints"

    def _optimizer(self) -> torch.optim.Optimizer:
        config, model = self.config, self.parts.model
        projection_lr = config.projection_lr or config.lr
        projections = [
            p for name, p in model.named_parameters() if ("projection" in name or "head" in name) and p.requires_grad
        ]
        projection_ids = {id(p) for p in projections}
        encoders = [p for p in model.parameters() if p.requires_grad and id(p) not in projection_ids]
        groups = [
            {"params": encoders, "lr": config.lr, "weight_decay": config.weight_decay},
            {"params": projections, "lr": projection_lr, "weight_decay": config.weight_decay},
            {"params": list(self.parts.objective.parameters()), "lr": config.lr, "weight_decay": 0.0},
        ]
        return torch.optim.AdamW([group for group in groups if group["params"]])

    # Checkpoints -----------------------------------------------------------------------------

    def state(self) -> dict:
        return {
            "position": vars(self.position).copy(),
            "optimizer": self.optimizer.state_dict(),
            "scheduler": self.scheduler.state_dict(),
            "objective": self.parts.objective.state_dict(),
            "rng": {
                "torch": torch.get_rng_state(),
                "cuda": torch.cuda.get_rng_state_all() if torch.cuda.is_available() else [],
                "numpy": np.random.get_state(),
                "python": random.getstate(),
            },
        }

    def save(self) -> None:
        if self.context.is_main:
            save_checkpoint(
                self.checkpoints, self.position.step, self.parts.model, self.state(), keep=self.config.keep_checkpoints
            )
        self.context.barrier()

    def resume(self) -> bool:
        """Continue from the latest checkpoint of the run, if there is one; return whether there was."""
        folder = latest_checkpoint(self.checkpoints)
        if folder is None:
            return False
        state = load_checkpoint(folder, self.parts.model)
        self.optimizer.load_state_dict(state["optimizer"])
        self.scheduler.load_state_dict(state["scheduler"])
        self.parts.objective.load_state_dict(state["objective"])
        torch.set_rng_state(state["rng"]["torch"])
        if state["rng"]["cuda"]:
            torch.cuda.set_rng_state_all(state["rng"]["cuda"])
        np.random.set_state(state["rng"]["numpy"])
        random.setstate(state["rng"]["python"])
        self.position = Position(**state["position"])
        return True

    # The loop --------------------------------------------------------------------------------

    def fit(self, progress=None) -> MetricsLog | None:
        """Train until ``epochs`` are done, checkpointing as configured; return the metrics log (main rank)."""
        config, context = self.config, self.context
        log = None
        if context.is_main:  # one writer: every rank shares the run folder
            log = MetricsLog(self.run_dir / "metrics.csv", METRICS, resume_step=self.position.step or None)
        self.parts.model.train()
        self.parts.objective.train()
        started, seen = time.perf_counter(), 0
        while self.position.step < self.total_steps:
            skipped = SkipReport(max_fraction=config.max_skipped_fraction)
            for batch in self._batches():
                if "skips" in batch:
                    skipped.merge(batch.pop("skips"))
                skipped.record_good(len(batch["index"]))
                if len(batch["index"]) < 2:
                    continue
                if isinstance(self.parts.objective, StatefulObjective):
                    # The fractional epoch of this step: schedules see the same value however the run was cut.
                    self.parts.objective.set_epoch(self.position.step / self.steps_per_epoch)
                loss = self.step(batch)
                self.position.batch += 1
                self.position.step += 1
                seen += config.batch_size
                if self.position.step % config.log_every == 0 or self.position.step == self.total_steps:
                    rate = seen / (time.perf_counter() - started)
                    row = self._metrics(loss, rate)
                    if log is not None:
                        log.write(row)
                    if progress is not None:
                        progress(row, self.total_steps)
                if config.checkpoint_every and self.position.step % config.checkpoint_every == 0:
                    self.save()
                if self.position.step >= self.total_steps:
                    break
            else:  # the epoch's batches are used up (streamed data may hold fewer than steps_per_epoch)
                self.position.epoch += 1
                self.position.batch = 0
            self._report_skips(skipped)
        self.save()
        return log

    def _batches(self):
        position, context = self.position, self.context
        if self.streamed:
            return stream_batches(
                self.parts.dataset, self.config.batch_size, self.steps_per_epoch, position.epoch, position.batch, context
            )
        return load_batches(self.parts.dataset, self.plan, position.epoch, position.batch, context)

    def _report_skips(self, skipped: SkipReport) -> None:
        """Say what the epoch could not read, and stop if it is more than the configured fraction."""
        if skipped.skipped and self.context.is_main:
            print(f"epoch {self.position.epoch}: {skipped.summary()}", file=sys.stderr, flush=True)
        skipped.check()

    def step(self, batch: dict) -> float:
        """One optimization step on a batch; returns the loss."""
        config, context, parts = self.config, self.context, self.parts
        device = context.device
        images = batch["image"].to(device, non_blocking=True)
        index = context.gather(batch["index"].to(device))
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=device.type == "cuda"):
            if parts.pipeline == "two_view":
                a, b = parts.model.embed_views(parts.augment(images), parts.augment(images))
            else:
                a, b = parts.model(parts.augment(images), batch["caption"])
        # The objective runs in float32: its exponentials need the range.
        a, b = context.gather(a.float()), context.gather(b.float())
        if isinstance(parts.objective, StatefulObjective):
            loss = parts.objective(a, b, index=index)
        else:
            loss = parts.objective(a, b)
        if not torch.isfinite(loss):
            raise FloatingPointError(f"non-finite loss {float(loss)} at step {self.position.step}")
        self.optimizer.zero_grad(set_to_none=True)
        loss.backward()
        context.reduce_gradients(parts.model.parameters(), parts.objective.parameters())
        if config.grad_clip > 0:
            nn.utils.clip_grad_norm_(parts.model.parameters(), config.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        return float(loss.detach())

    def _metrics(self, loss: float, rate: float) -> dict[str, float]:
        temperature = getattr(self.parts.objective, "temperature", None)
        if callable(temperature):
            temperature = float(temperature().detach())
        return {
            "step": self.position.step,
            "epoch": self.position.step / self.steps_per_epoch,
            "loss": loss,
            "lr": self.optimizer.param_groups[0]["lr"],
            "temperature": temperature if temperature is not None else "",
            "samples_per_second": rate,
        }


def embed(model: nn.Module, images: Tensor, device: torch.device, layer: str = "encoder", batch_size: int = 1024) -> Tensor:
    """The features probes read (``model.features(..., layer)``) of ``images``, in eval mode, on the CPU."""
    model.eval()
    outputs = []
    with torch.no_grad():
        for start in range(0, len(images), batch_size):
            outputs.append(model.features(images[start : start + batch_size].to(device), layer).float().cpu())
    return torch.cat(outputs)
