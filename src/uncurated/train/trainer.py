"""The training loop: any objective, two views or image-text, one process or several, resumable.

One step: load this process's share of the global batch, augment it on the
device, embed it (the towers wrapped by DistributedDataParallel or FSDP2
under ``torchrun``, :mod:`.parallel`), call the objective on it (the
objective gathers the rest of the batch itself and returns the mean over this
process's rows), back-propagate (DDP averages the gradients while the
backward pass runs), step AdamW under a warmup + cosine schedule. With
``micro_batch_size=N`` the share is embedded N samples at a time without a
graph, and each micro-batch is embedded again with its graph once the
objective's gradient at the embeddings is known (:mod:`.gradient_cache`):
the whole batch's gradient (batch norm aside, which normalizes each
micro-batch) for any batch whose B x d embeddings fit, reduced across
processes once per step. The global objectives update their per-sample
state inside the objective call. Every ``checkpoint_every`` steps and at the
end the model, optimizer, schedule, objective state (every process's rows),
every process's random generators and the data position are checkpointed, so
a killed run resumed with ``resume=true`` ends with the weights and state of
an uninterrupted one; it may resume under another number of processes.

Random numbers: what every process must draw alike (the initial weights, the
data's order, WPSE's random features) comes from the run's ``seed`` alone;
what each draws for itself (augmentations, dropout) from its own generators,
seeded per process and checkpointed for every process (:mod:`.random_state`).

Faults cost a step or a checkpoint, never the run, and never pass unseen:

* A step whose embeddings, loss or gradients are not finite (on any process), or whose objective refused a
  non-finite state update in its backward pass (NUCLR on tiles), is skipped on every process: the model's
  buffers (batch-norm statistics) and the objective's per-sample rows of the batch are put back as they were,
  the optimizer does not step, the step is logged and counted (``nonfinite_steps`` in the metrics). More than
  ``max_nonfinite_steps`` in a row stop the run with :class:`NonFiniteError`
  naming the step; the last checkpoint is left as it was.
* A checkpoint that cannot be written (a full disk, a folder another process
  cannot see) stops the run with :class:`CheckpointWriteError` on every
  process; its temporary folder is removed and the previous checkpoint stays
  valid.
* A resumed run whose configuration or dataset size differs from the
  checkpoint's in a way the saved state depends on is refused with a
  :class:`~uncurated.train.config.ConfigError` naming the keys.
* The items the data could not read are counted per reason and reported at
  the end of each epoch; the counts of an epoch cut by a kill are restored
  with the checkpoint.
"""

from __future__ import annotations

import math
import sys
import time
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

import torch
from safetensors import SafetensorError
from torch import Tensor, nn
from torch.utils.data import IterableDataset

from ..data import SkipCounts
from ..errors import RunStopped
from ..host_reads import check_later, flush, pending_checks
from ..process.shard import agree_on_step, agreed_shard
from . import random_state, skipped_items
from .autocast import autocast_bf16
from .background_save import BackgroundWriter, CheckpointWriteError, snapshot
from .batches import BatchPlan, load_batches, report_short_epoch, stream_batches
from .builders import TrainingParts, dataset_size
from .checkpoint import (
    SHARDS,
    abandon_checkpoint,
    describe_written,
    new_run_id,
    prepare_checkpoint,
    publish_checkpoint,
    write_objective_state,
)
from .config import ConfigError, TrainConfig
from .distributed import Distributed
from .gradient_cache import GradientCache
from .interruption import RunInterrupted, StopRequest
from .learning_rate import warmup_cosine
from .metrics import MetricsLog
from .optimizer import adamw
from .parallel import (
    Embedder,
    distribute_objective,
    distribute_towers,
    save_shards,
    sharded_state,
    whole_model_state,
    whole_optimizer_state,
)
from .resumption import Position, Resuming
from .skipped_items import SkippedItems
from .step_guard import NonFiniteEmbeddings, StepRollback, gradients_finite, refuse_nonfinite_embeddings
from .supervision import label_partners
from .trackers import open_trackers

METRICS = ["step", "epoch", "loss", "lr", "temperature", "samples_per_second", "nonfinite_steps"]
"""The columns of ``metrics.csv`` every run has; the objective's diagnostics follow them."""


class NonFiniteError(RunStopped, FloatingPointError):
    """More than ``max_nonfinite_steps`` steps in a row had non-finite embeddings, loss or gradients."""


@dataclass(frozen=True)
class Agreement:
    """What the processes decided together before a batch (:meth:`Trainer._agree`)."""

    every_process_has_one: bool  # a batch; else the epoch ends
    usable: bool  # every process's share holds at least two items
    stop: bool  # a process was asked to stop
    save: bool  # a checkpoint is due by the main process's clock (checkpoint_minutes)
    counts: list[float]  # the epoch's items, good and skipped per reason, summed over the processes


class Trainer(Resuming):
    """Runs the optimization of ``parts`` as ``config`` says, writing into ``run_dir``."""

    clock = staticmethod(time.perf_counter)  # seconds: the throughput, train_seconds, checkpoint_minutes

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
            self.plan = BatchPlan(dataset_size(parts.dataset), config.batch_size, config.seed)
            self.steps_per_epoch = self.plan.steps_per_epoch
        self.total_steps = max(1, math.ceil(config.epochs * self.steps_per_epoch))
        self.bf16 = autocast_bf16(config.precision, context.device, config.fsdp_mixed_precision)
        # What the processes run: the towers (DDP or FSDP2, before the optimizer sees their parameters), the objective.
        embedder = Embedder(parts.model, parts.pipeline, self.bf16)
        self.towers = distribute_towers(
            embedder, context, config.parallel, config.sync_batch_norm, config.fsdp_mixed_precision
        )
        self.sharded = context.enabled and config.parallel == "fsdp"
        self.objective = distribute_objective(parts.objective, context)
        # The trainer checks the objective's inputs itself, without a read from the device per check (the step's
        # reads are the embeddings' finiteness and the loss with the gradients' finiteness), under a process group
        # too: its processes agree on the step before the objective (agree_on_step), which then checks nothing.
        parts.objective.check_inputs = False
        self.optimizer = adamw(config, parts.model, parts.objective)
        self.optimized = nn.ModuleDict({"model": parts.model, "objective": parts.objective})
        warmup = round(config.warmup_epochs * self.steps_per_epoch)
        self.scheduler = torch.optim.lr_scheduler.LambdaLR(
            self.optimizer, lambda step: warmup_cosine(step, self.total_steps, warmup)
        )
        self.position = Position()
        self.checkpoints = run_dir / "checkpoints"
        self.nonfinite = {"total": 0, "in_a_row": 0}
        self.skipped = SkippedItems(config.max_skipped_fraction, context)  # saved with checkpoints
        self.counts_skips = hasattr(parts.dataset, "report")  # data read from files: skipped items in metrics.csv
        self.last_checkpoint: Path | None = None
        self.saved_position: Position | None = None  # that of the last checkpoint written
        self.writer = BackgroundWriter(context)  # for checkpoint_async
        self.stop_request = StopRequest(alone=not context.enabled)
        self.stopping = False  # the processes agreed to stop at this step boundary
        self.seen = 0  # samples trained on since fit() started, for the throughput
        self.started = self.last_save_time = self.clock()
        self.seconds_before = 0.0  # the training time of the run before it was resumed
        # Written into every file of its checkpoints (the main process's, for all); a resumed run keeps its own.
        self.run_id: str = context.broadcast_object(new_run_id() if context.is_main else None)
        # Called on every process after each epoch but the last, with the epochs done, the step and the log.
        self.epoch_end: Callable[[float, int, MetricsLog | None], None] | None = None
        self.partners = label_partners(config, parts.dataset)  # positives=label: same-label second views
        # micro_batch_size: embed in micro-batches, exact gradients by replay (.gradient_cache); 0: at once.
        self.gradient_cache = GradientCache(self.towers, config.micro_batch_size) if config.micro_batch_size else None
        if context.rank:  # the main process draws on from the generators that built the model, as one process does
            random_state.seed_everything(random_state.process_seed(config.seed, context.rank))

    # Checkpoints -----------------------------------------------------------------------------

    def state(self, optimizer: dict, ranks: list[dict]) -> dict:
        """What a checkpoint saves besides the weights and the objective (each process's), as values
        :mod:`.state_codec` writes: the position and non-finite counts (the same on every process), the
        ``optimizer``'s (whole) state, the schedule, and ``ranks``: every process's :meth:`process_state`, by rank."""
        return {
            "position": vars(self.position).copy(),
            "nonfinite": dict(self.nonfinite),
            "optimizer": optimizer,
            "scheduler": self.scheduler.state_dict(),
            "ranks": ranks,
            "skipped_items": self.skipped.state_dict(),
        }

    def process_state(self) -> dict:
        """What differs between the processes: this one's random generators and the counts of the items it could
        not read in the current epoch."""
        return {
            "rng": random_state.capture(),
            "epoch_skips": self.skipped.epoch.state_dict(),
        }

    def metadata(self) -> dict:
        """What a resumed run must agree with, saved in each checkpoint's manifest, and the seconds trained so far."""
        return {
            "config": self.config.to_dict(),
            "dataset_size": dataset_size(self.parts.dataset),
            "train_seconds": self.train_seconds(),
        }

    def train_seconds(self) -> float:
        """The seconds the run has trained, the parts before it was resumed included (to their checkpoint)."""
        return self.seconds_before + self.clock() - self.started

    def _save_once(self, background: bool = False) -> None:
        """:meth:`save`, unless the last checkpoint was written at this position; a save that is not ``background``
        (the run's last, a stop's) waits for the one in flight first, written at this position or not."""
        if not background:
            self._finish_background_save()
        if self.saved_position != self.position:
            self.save(background)

    def save(self, background: bool = False) -> None:
        """Checkpoint the run: every process writes its objective state, the main one the rest; raise
        :class:`CheckpointWriteError` on every process if any write fails (nothing is published then).
        ``background``: the main process publishes a copy in its writer's thread (:mod:`.background_save`) and the
        call returns; the next save, or :meth:`_finish_background_save`, waits for it."""
        self._finish_background_save()
        context, step, staging = self.context, self.position.step, None
        try:
            created = context.everywhere(
                lambda: prepare_checkpoint(self.checkpoints, step) if context.is_main else None
            )
            staging = context.broadcast_object(created)
            context.everywhere(
                lambda: write_objective_state(
                    staging,
                    context.rank,
                    context.world_size,
                    self.parts.objective.state_dict(),
                    run=self.run_id,
                    step=step,
                )
            )
            shards_written = None
            if self.sharded:  # FSDP2: every process writes its shards; none holds the whole model
                tensors, rest = sharded_state(self.parts.model, self.optimized, self.optimizer)
                if background:  # copied to the host, then written by DCP's thread while training goes on
                    shards_written = context.everywhere(lambda: self.writer.write_shards(tensors, staging, step))
                else:
                    context.everywhere(lambda: save_shards(tensors, staging / SHARDS))
                del tensors
                model, optimizer = rest["model"], {"param_groups": rest["param_groups"], "sharded": True}
            else:
                model = whole_model_state(self.parts.model, False)
                optimizer = whole_optimizer_state(self.optimized, self.optimizer, False)
            ranks = context.gather_object(self.process_state())
            state, metadata = self.state(optimizer, ranks), self.metadata()
            if background:  # the main process's copy of what training goes on changing, published by its thread
                copied = snapshot((model, state)) if context.is_main else ({}, {})
                publish = partial(self._publish, staging, step, copied[0], copied[1], metadata)
                main_publish = publish if context.is_main else None
                context.everywhere(lambda: self.writer.start(step, staging, main_publish, shards_written))
            else:  # each process hashes the files it wrote; the main one publishes with their checksums, reading none
                written = context.everywhere(lambda: describe_written(staging, context.rank, context.world_size))
                described = {name: entry for files in context.gather_object(written) for name, entry in files.items()}
                folder = context.everywhere(
                    lambda: self._publish(staging, step, model, state, metadata, described) if context.is_main else None
                )
        except (OSError, SafetensorError) as error:  # safetensors reports a folder it cannot write into itself
            if context.is_main and staging is not None:
                abandon_checkpoint(staging)
            raise self._write_failed(step, error) from error
        if not background:
            self.last_checkpoint = context.broadcast_object(folder)
        self.saved_position = Position(**vars(self.position))
        self.last_save_time = self.clock()

    def _finish_background_save(self) -> None:
        """Wait for the checkpoint written in the background, if one is, and take it as the last; raise
        :class:`CheckpointWriteError` on every process if it failed (every process must call)."""
        self.last_checkpoint = self.writer.finish(self._write_failed) or self.last_checkpoint

    def _write_failed(self, step: int, error: BaseException) -> CheckpointWriteError:
        return CheckpointWriteError.of(step, self.checkpoints, self._last_checkpoint_name(), error)

    def _publish(self, staging: Path, step: int, model: dict, state: dict, metadata: dict, described: dict) -> Path:
        """The main process's share of the checkpoint of ``step`` (given: in the background, training has moved on)."""
        return publish_checkpoint(
            self.checkpoints,
            staging,
            step,
            model,
            state,
            processes=self.context.world_size,
            run=self.run_id,
            keep=self.config.keep_checkpoints,
            metadata=metadata,
            sharded=self.sharded,
            described=described,
        )

    def _last_checkpoint_name(self) -> str:
        return "none yet" if self.last_checkpoint is None else str(self.last_checkpoint)

    # The loop --------------------------------------------------------------------------------

    def fit(self, progress=None) -> MetricsLog | None:
        """Train until ``epochs`` are done, checkpointing as configured; return the metrics log (main rank).

        Asked to stop by a signal (:mod:`.interruption`), every process stops at the next step boundary, the
        checkpoint of that step is written and :class:`RunInterrupted` is raised.
        """
        log = None
        if self.context.is_main:  # one writer: every rank shares the run folder
            columns = METRICS + self._diagnostic_columns() + (skipped_items.COLUMNS if self.counts_skips else [])
            resume_step = self.position.step or None
            trackers = open_trackers(
                self.config.report_to, self.run_dir, self.config.to_dict(), self.run_id, resume_step
            )
            log = MetricsLog(self.run_dir / "metrics.csv", columns, resume_step=resume_step, trackers=trackers)
        self.parts.model.train()
        self.parts.objective.train()
        self.started = self.last_save_time = self.clock()
        with self.stop_request.catching():  # also while the stop's checkpoint is written: a repeat waits for it
            while self.position.step < self.total_steps and not self.stopping:
                self._epoch(log, progress)
            if self.stopping:
                self._save_once()
        if self.stopping:
            asked = self.stop_request.signal_name or "a signal to another process"
            raise RunInterrupted(
                f"stopped by {asked} at step {self.position.step} of {self.total_steps}; the checkpoint is "
                f"{self.last_checkpoint}; continue with the same command and resume=true"
            )
        breach = self.skipped.end_epoch(self.position.epoch)  # the last epoch's, cut by the end of the run
        self._save_once()
        if breach is not None:
            raise self.skipped.refusal(breach, f"the run ended with its last checkpoint, {self.last_checkpoint}")
        return log

    def _epoch(self, log: MetricsLog | None, progress) -> None:
        """Train on this epoch's batches from the position on, until the epoch ends (its skipped items reported
        and checked, a checkpoint written with ``checkpoint_each_epoch``), the run's steps are done, or the
        processes agree to stop."""
        position = self.position
        for batch, usable in self._batches_in_step():
            if not usable:  # (nearly) all of a share was unreadable
                position.batch += 1
                continue
            self._train_step(batch, log, progress)
            if position.step >= self.total_steps:
                return
        if self.stopping:
            return
        report_short_epoch(position.batch, self.steps_per_epoch, position.epoch, self.context)
        breach = self.skipped.end_epoch(position.epoch)
        position.epoch += 1
        position.batch = 0
        if breach is None and self.epoch_end is not None:  # before the epoch's checkpoint: a kill repeats both
            began = self.clock()
            self.epoch_end(float(position.epoch), position.step, log)
            self.started += self.clock() - began  # the throughput and train_seconds count training alone
        if breach is not None:
            self._save_once()
        elif self.config.checkpoint_each_epoch:
            self._save_once(background=self.config.checkpoint_async)
        if breach is not None:
            raise self.skipped.refusal(
                breach, f"the run stopped at the epoch's end, checkpointed in {self.last_checkpoint}"
            )

    def _train_step(self, batch: dict, log: MetricsLog | None, progress) -> None:
        """One step on ``batch``, then its metrics row and checkpoint where they are due."""
        config, position = self.config, self.position
        # The fractional epoch of this step: schedules see the same value however the run was cut.
        self.parts.objective.set_epoch(position.step / self.steps_per_epoch)
        with self.context.peers_answering("a training step"):
            loss = self.step(batch)
        position.batch += 1
        position.step += 1
        self.seen += config.batch_size
        if position.step % config.log_every == 0 or position.step == self.total_steps:
            row = self._metrics(loss, self.seen / (self.clock() - self.started))
            if log is not None:
                log.write(row)
            if progress is not None:
                progress(row, self.total_steps)
        if config.checkpoint_every and position.step % config.checkpoint_every == 0:
            self._save_once(background=self.config.checkpoint_async)

    def _batches_in_step(self) -> Iterator[tuple[dict, bool]]:
        """This process's batches of the epoch, each with whether every process's share of it holds at least two
        items, until the batches of any process run out (the epoch then ends on every process at once: streamed
        shards may hold fewer samples on one) or the processes agree to stop.

        Before each batch the processes agree (:meth:`_agree`) on that, on a stop asked of any of them, on a
        checkpoint due by the main one's clock, and on the epoch's skipped items, which stop the run on every
        process at once, checkpointed, when there are too many (:mod:`.skipped_items`).
        """
        batches = iter(self._batches())
        while True:
            batch = next(batches, None)
            read = skipped_items.batch_counts(batch)
            agreed = self._agree(batch, read)
            if agreed.stop:
                self.stopping = True
                return
            if self.skipped.agreed(agreed.counts):
                self._save_once()
                breach = self.skipped.breach_now(self.position.epoch, read)
                raise self.skipped.refusal(
                    breach, f"the run stopped at step {self.position.step}, checkpointed in {self.last_checkpoint}"
                )
            if read is not None:
                self.skipped.epoch.add(read)
            if batch is None or not agreed.every_process_has_one:
                return
            if agreed.save:
                self._save_once(background=self.config.checkpoint_async)
            yield batch, agreed.usable

    def _agree(self, batch: dict | None, read: SkipCounts | None) -> Agreement:
        """What every process must decide alike before ``batch`` (``None``: this process's batches ran out), from
        one all-reduce of a few numbers under torchrun (none, and no read from the device, in one process)."""
        context = self.context
        save_due = bool(
            context.is_main
            and self.config.checkpoint_minutes
            and self.clock() - self.last_save_time >= 60 * self.config.checkpoint_minutes
        )
        has_two = batch is not None and len(batch["index"]) >= 2
        flags = [batch is not None, has_two, self.stop_request.requested, save_due]
        numbers = [float(flag) for flag in flags] + self.skipped.numbers(read)
        if context.enabled:  # sums over the processes (an average times their number, exact for these counts)
            averaged = context.average(torch.tensor(numbers, dtype=torch.float64)).tolist()
            numbers = [float(round(value * context.world_size)) for value in averaged]
        having, usable, stopping, saving = numbers[:4]
        world = context.world_size
        return Agreement(having == world, usable == world, stopping > 0, saving > 0, numbers[4:])

    def _batches(self):
        position, context = self.position, self.context
        workers = self.config.num_workers
        if self.streamed:
            return stream_batches(
                self.parts.dataset,
                self.config.batch_size,
                self.steps_per_epoch,
                position.epoch,
                position.batch,
                context,
                workers=workers,
            )
        return load_batches(self.parts.dataset, self.plan, position.epoch, position.batch, context, workers=workers)

    def step(self, batch: dict) -> float:
        """One optimization step on a batch; returns the loss (the mean over the processes).

        A step whose embeddings, loss or gradients are not finite on some
        process changes nothing but the position and the schedule, on every
        process (see the module's documentation).
        """
        config, context, parts = self.config, self.context, self.parts
        parts.objective.begin_step()  # one state update per step (a second call would raise), undone if skipped
        rollback = StepRollback(parts.model, parts.objective)
        # On the host, where the loader put them; a no-op for objectives without per-sample state.
        parts.objective.check_indices(batch["index"], len(batch["index"]))
        a, b = self._embed(batch)
        index = batch["index"].to(context.device, non_blocking=True)
        labels = batch["label"].to(context.device, non_blocking=True) if config.oracle_negatives else None
        # Two reads from the device per step: the embeddings' finiteness (the objective refuses non-finite
        # features), then the loss with the gradients' finiteness, after the backward pass. In one process the
        # first is read with the objective's own read, where its engine makes one (host_reads); under a process
        # group it is gathered with every process's batch size before the objective, which every process must
        # call, and which then exchanges no sizes of its own (agree_on_step).
        embeddings_finite = torch.isfinite(a).all() & torch.isfinite(b).all()
        if context.enabled:
            shard, (finite_processes,) = agree_on_step(len(a), embeddings_finite[None])
            if finite_processes != context.world_size:
                return self._skip(rollback, "non-finite embeddings", math.nan)
            with agreed_shard(shard):
                loss = self._loss(a, b, index, labels)
        else:
            try:
                with pending_checks():
                    check_later(embeddings_finite, refuse_nonfinite_embeddings)
                    loss = self._loss(a, b, index, labels)
                    flush()
            except NonFiniteEmbeddings:
                return self._skip(rollback, "non-finite embeddings", math.nan)
        self.optimizer.zero_grad(set_to_none=True)
        self._backward(loss, a, b)  # also for a non-finite loss: its gradients are read with it, then dropped
        finite = gradients_finite(self.optimizer).to(loss.device)
        # A state update written in the backward pass (tiled NUCLR) and refused there is read here too.
        refused = parts.objective.take_backward_refusal()
        accepted = finite.new_ones(()) if refused is None else refused.logical_not().to(loss.device)
        flags = torch.stack([loss.detach().double(), finite.double(), accepted.double()])
        value, finite_gradients, accepted_update = context.average(flags).tolist()
        if not math.isfinite(value):
            return self._skip(rollback, f"non-finite loss {value}", value)
        if finite_gradients != 1.0:
            return self._skip(rollback, "non-finite gradients", value)
        if accepted_update != 1.0:
            return self._skip(rollback, "a non-finite state update, refused", value)
        if config.grad_clip > 0:
            nn.utils.clip_grad_norm_(parts.model.parameters(), config.grad_clip)
        self.optimizer.step()
        self.scheduler.step()
        self.nonfinite["in_a_row"] = 0
        return value

    def _loss(self, a: Tensor, b: Tensor, index: Tensor, labels: Tensor | None) -> Tensor:
        """The objective on this process's share (it gathers the rest; the global objectives update their state)."""
        return self.objective(a, b, index=index, labels=labels)

    def _embed(self, batch: dict) -> tuple[Tensor, Tensor]:
        """The float32 embeddings of this process's share of the batch, augmented and embedded by the towers.

        With ``micro_batch_size`` they are computed without a graph and returned as leaves that require
        gradients; :meth:`_backward` takes the towers' gradient through them.
        """
        parts, device = self.parts, self.context.device
        images = batch["image"].to(device, non_blocking=True)
        # The views are drawn once for the whole share, so micro-batches embed the whole batch's augmentations.
        with torch.autocast(device_type=device.type, dtype=torch.bfloat16, enabled=self.bf16):
            first = parts.augment(images)
            if parts.pipeline == "two_view":
                if self.partners is None:
                    other = images
                else:  # this process's rows of the step's partner draw
                    rows = self.context.local_slice(self.config.batch_size)
                    other = self.partners.images(batch["index"], self.position.step, rows)
                second = parts.augment(other.to(device, non_blocking=True))
            else:
                second = batch["caption"]

        def embed_part(part: slice) -> tuple[Tensor, Tensor]:
            return self.towers(first[part], second[part])

        if self.gradient_cache is None:
            return embed_part(slice(None))
        a, b = self.gradient_cache.embed(embed_part, len(images))
        return a.requires_grad_(), b.requires_grad_()

    def _backward(self, loss: Tensor, a: Tensor, b: Tensor) -> None:
        """Back-propagate ``loss`` into the towers and the objective's parameters (through the micro-batches'
        replay with ``micro_batch_size``)."""
        loss.backward()
        if self.gradient_cache is not None:
            grads = [torch.zeros_like(x) if x.grad is None else x.grad for x in (a, b)]
            self.gradient_cache.backward(*grads)

    def _skip(self, rollback: StepRollback, reason: str, loss: float) -> float:
        """Undo what a non-finite step changed, count it, and stop the run after too many in a row."""
        rollback.restore()
        self.optimizer.zero_grad(set_to_none=True)
        self.scheduler.step()  # the schedule follows the position, skipped steps included
        self.nonfinite["total"] += 1
        self.nonfinite["in_a_row"] += 1
        step, in_a_row, limit = self.position.step, self.nonfinite["in_a_row"], self.config.max_nonfinite_steps
        if in_a_row > limit:
            raise NonFiniteError(
                f"{in_a_row} non-finite steps in a row, more than max_nonfinite_steps = {limit}; the last at step "
                f"{step}: {reason}. The run stops; its last checkpoint ({self._last_checkpoint_name()}) is intact. "
                "Lower lr, set grad_clip or check the data, then continue with resume=true."
            )
        if self.context.is_main:
            print(
                f"step {step}: {reason}; step skipped ({in_a_row} in a row, at most {limit} allowed)",
                file=sys.stderr,
                flush=True,
            )
        return loss

    def _diagnostic_columns(self) -> list[str]:
        """The columns of the objective's diagnostics, named after it (``dcl_clamped_fraction``)."""
        objective = self.parts.objective
        return [f"{objective.name}_{name}" for name in objective.diagnostic_names]

    def _metrics(self, loss: float, rate: float) -> dict[str, float]:
        objective = self.parts.objective
        diagnostics = objective.diagnostics
        if diagnostics:  # each process's mean over its rows; the rows are as many on every process
            averaged = self.context.average(torch.tensor(list(diagnostics.values()), dtype=torch.float64))
            diagnostics = dict(zip(diagnostics, averaged.tolist(), strict=True))
        return {
            "step": self.position.step,
            "epoch": self.position.step / self.steps_per_epoch,
            "loss": loss,
            "lr": self.optimizer.param_groups[0]["lr"],
            "temperature": float(objective.temperature().detach()),
            "samples_per_second": rate,
            "nonfinite_steps": self.nonfinite["total"],
            **{f"{objective.name}_{name}": value for name, value in diagnostics.items()},
            **(self.skipped.metrics() if self.counts_skips else {}),
        }
