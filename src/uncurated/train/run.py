"""A whole training run: build the parts, train (or resume), evaluate, write the report.

A run lives in ``<out>/<name>/``: ``config.yaml`` (the resolved
configuration), ``metrics.csv`` and ``curves.png`` (the training curves),
``checkpoints/``, ``report.json`` (what the run reached, measured as
:mod:`.evaluation` describes) and, for a text tower trained from scratch
(``text_encoder=transformer`` or an ``hf:`` architecture), ``tokenizer.json``
(the subword tokenizer trained on its captions, reused when the run resumes;
a run trained before that tower read subwords gets the equivalent of its
word-level vocabulary there when it resumes).
"""

from __future__ import annotations

import dataclasses
import json
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from torch import nn

from ..data import expand_shards
from ..progress import progress
from .builders import (
    TOKENIZER_FILE,
    TrainingParts,
    build_augmentation,
    build_model,
    build_objective,
    build_splits,
    dataset_size,
    first_sample,
    save_run_tokenizer,
)
from .checkpoint import latest_checkpoint
from .config import ConfigError, TrainConfig
from .data_formats import FORMATS
from .distributed import Distributed, setup, teardown
from .evaluation import evaluate, format_report
from .lock import RunLock
from .metrics import MetricsLog, plot_curves
from .parallel import fsdp_policy, whole_model_state
from .periodic_evaluation import PeriodicEvaluation, evaluation_row, recorded_evaluations
from .presets import default_run_name, paper_notes
from .random_state import seed_everything
from .real_sets import real_set_evaluation
from .restore import earlier_tokenizer_of, write_training_data
from .run_paths import with_absolute_paths
from .trackers import check_trackers
from .trainer import Trainer


def run_name(config: TrainConfig) -> str:
    return config.name or default_run_name(config)


def train(config: TrainConfig, notes: Sequence[str] = ()) -> dict:
    """Train as ``config`` says and return the report (also written to ``report.json``); ``notes`` (what
    :func:`~uncurated.train.config.resolve_config` says of the configuration) are printed at the start, with
    the objective's parameters that are not its paper's (:func:`~uncurated.train.presets.paper_notes`).

    The main process holds the run folder's lock (:class:`~uncurated.train.lock.RunLock`)
    until it returns. A configuration that cannot be built, a run folder in
    use, or a resumed run whose saved state does not fit the configuration
    raise :class:`ConfigError`; see :mod:`uncurated.train.trainer` for the faults met while training. Every
    condition it detects is a :class:`~uncurated.errors.RunStopped`. The paths ``config`` names are read from the
    current folder and kept absolute in the run (:mod:`~uncurated.train.run_paths`).
    """
    config = with_absolute_paths(config)
    check_device(config.device)
    check_trackers(config.report_to)
    context = setup(config.device, timeout=config.dist_timeout)
    lock = RunLock(Path(config.out) / run_name(config))
    try:
        return _train(config, context, lock, notes)
    finally:
        if context.is_main:
            lock.release()
        teardown(context)


def check_device(device: str) -> None:
    """Refuse, before anything is written, a ``device`` this machine does not have (``cuda`` on a CPU build)."""
    import torch

    if device == "auto":
        return
    try:
        chosen = torch.device(device)
    except (RuntimeError, ValueError) as error:
        raise ConfigError(
            f"device={device} is not a device name ({error}); use auto, cpu, cuda, cuda:N or mps"
        ) from None
    if chosen.type == "cuda" and not (torch.cuda.is_available() and (chosen.index or 0) < torch.cuda.device_count()):
        found = f"{torch.cuda.device_count()} CUDA devices" if torch.cuda.is_available() else "no CUDA device"
        raise ConfigError(f"device={device} is not available: this machine has {found}; use device=auto or cpu")
    if chosen.type == "mps" and not torch.backends.mps.is_available():
        raise ConfigError(f"device={device} is not available on this machine; use device=auto or cpu")


def _refuse_before_writing(config: TrainConfig, context: Distributed) -> None:
    """On every process, before the run folder is made: what the configuration alone cannot tell is refused here,
    against this launch (its processes, its shards), so that a refused run leaves no empty folder."""
    try:
        if config.dataset == "webdataset" and config.steps_per_epoch < 1:
            raise ValueError(
                "dataset=webdataset is streamed, without a length: give steps_per_epoch=N (batches per pass)"
            )
        context.check_batch_size(config.batch_size)
        if config.dataset == "webdataset" and config.data_dir and not config.resample_shards:  # resampled: no split
            context.check_shard_count(len(expand_shards(config.data_dir)))
        fsdp_policy(config.fsdp_mixed_precision, config.parallel if context.enabled else "one process")
    except ValueError as error:
        raise ConfigError(str(error)) from error


def _train(config: TrainConfig, context: Distributed, lock: RunLock, notes: Sequence[str]) -> dict:
    _refuse_before_writing(config, context)
    run_dir = lock.folder
    context.main_first(lambda: _prepare_run_dir(run_dir, config, lock))
    try:  # before anything but the lock is written, not at the first checkpoint
        context.check_shared_folder(run_dir)
    except ValueError as error:
        raise ConfigError(str(error)) from error
    try:
        splits = build_splits(config)
        if config.data_on_device:
            if not hasattr(splits.train, "to"):
                raise ConfigError(f"data_on_device=true applies to in-memory datasets, not dataset={config.dataset}")
            splits.train.to(context.device)
        # Seeded after the data, whose loading may import modules that draw from the global generators.
        # The main process trains the text tower's tokenizer once (or finds the resumed run's); all read it.
        tokenizer_path = run_dir / TOKENIZER_FILE
        context.main_first(lambda: save_run_tokenizer(config, splits.train, tokenizer_path, _earlier(config, run_dir)))
        seed_everything(config.seed)
        model = build_model(config, splits.train, tokenizer_path=tokenizer_path).to(context.device)
        objective = build_objective(config, splits.train).to(context.device)
        parts = TrainingParts(model, objective, splits.train, build_augmentation(config), config.pipeline)
        trainer = Trainer(config, parts, context, run_dir)
        trainer.epoch_end = _periodic_evaluation(config, trainer, splits, tokenizer_path, _printer(context))
    except ConfigError:
        raise
    except ValueError as error:  # the builders check their arguments, which come from the configuration
        raise ConfigError(f"invalid configuration: {error}") from error
    except FileNotFoundError as error:  # the data the configuration names is not there
        raise ConfigError(str(error)) from error
    resumed = config.resume and trainer.resume()
    if context.is_main:  # after resume() accepted the configuration: config.yaml describes the saved state
        (run_dir / "config.yaml").write_text(yaml.safe_dump(config.to_dict(), sort_keys=False))
        write_training_data(run_dir, splits.train)  # so that the run is restored without its training data
    say = _printer(context)
    fresh = [f"note: resume=true: {run_dir} holds no checkpoint; training from the start"] if config.resume else []
    for note in [*notes, *paper_notes(config), *(fresh if not resumed else [])]:
        say(note)
    say(
        f"{'resuming' if resumed else 'training'} {run_dir.name}: {config.pipeline} on {config.dataset} "
        f"({'streamed' if trainer.streamed else dataset_size(splits.train)} samples), {config.objective}, "
        f"{trainer.total_steps} steps of "
        f"{config.batch_size}" + (f" from step {trainer.position.step}" if resumed else "")
    )
    if config.micro_batch_size:
        notice = micro_batch_norm_notice(model, config.micro_batch_size)
        if notice:
            say(notice)
    progress = _progress_bar(trainer, config, context)
    try:
        log = trainer.fit(progress=progress.update if progress else None)
    finally:
        if progress:
            progress.close()
    return _report(config, trainer, splits, tokenizer_path, log)


def _report(config: TrainConfig, trainer: Trainer, splits, tokenizer_path: Path, log: MetricsLog | None) -> dict:
    """The run's report: its evaluation at the end (and those along the way, ``eval_every``), written to
    ``report.json`` and shown by the main process, whose ``log`` it closes."""
    context, run_dir, say = trainer.context, trainer.run_dir, _printer(trainer.context)
    evaluated = _evaluated_model(config, trainer, splits.train, tokenizer_path)
    report: dict[str, Any] = {
        "run": str(run_dir),
        "config": config.to_dict(),
        "train_seconds": trainer.train_seconds(),  # the parts before a resumption included
        "steps": trainer.total_steps,
        # The per-sample state's rows: with the steps and the batch, how often each sample's u or zeta was updated.
        "train_samples": None if trainer.streamed else dataset_size(splits.train),
    }
    if trainer.counts_skips:
        report["skipped_items"] = trainer.skipped.report()
    if log is not None and evaluated is not None:  # the main rank's: the only one that keeps the log and reports
        plot_curves(log.path, run_dir / "curves.png", keys=("loss", "lr", "temperature"))
        if splits.test is not None:
            say("evaluating ...")
            report["evaluation"] = evaluate(config, evaluated, splits, context.device)
        if config.zero_shot_dir or config.retrieval_file:
            say("evaluating on the configured real sets ...")
            shape = trained_image_shape(config, splits.train)
            report.setdefault("evaluation", {}).update(real_set_evaluation(config, evaluated, context.device, shape))
        elif splits.test is None:
            say(unevaluated_note(config, run_dir))
        if config.eval_every:  # the end's evaluation joins those during training
            position = trainer.position
            epochs = position.epoch + position.batch / trainer.steps_per_epoch
            log.write(evaluation_row(report.get("evaluation", {}), epochs, position.step))
            report["evaluations"] = recorded_evaluations(log.path)
        log.close()
        (run_dir / "report.json").write_text(json.dumps(report, indent=2) + "\n")
        say(format_report(report))
    return report


def trained_image_shape(config: TrainConfig, train_set) -> tuple[int, ...] | None:
    """The (channels, height, width) of an in-memory training set's images, which evaluation images are decoded
    to; ``None`` for files, decoded as their keys say."""
    return None if not FORMATS[config.dataset].in_memory else tuple(first_sample(train_set)["image"].shape)


def unevaluated_note(config: TrainConfig, run_dir: Path) -> str:
    """What a run with nothing to evaluate on says at its end: why, and how to evaluate it."""
    how = (
        "give zero_shot_dir=FOLDER or retrieval_file=FILE, or run `uncurated eval "
        f"{run_dir} --retrieval FILE` (or --zero-shot-dir FOLDER)"
        if config.pipeline == "image_text"
        else "the real sets measure image-text runs, and nothing measures a two-view run without a test split"
    )
    return f"note: not evaluated: dataset={config.dataset} has no test split; {how}"


def _evaluated_model(config: TrainConfig, trainer: Trainer, train_set, tokenizer_path: Path) -> nn.Module | None:
    """The model the main process evaluates: the trained one, or where FSDP2 sharded the towers a whole copy of the
    weights, gathered on every process; ``None`` on the others."""
    model, context = trainer.parts.model, trainer.context
    if trainer.sharded:
        whole = whole_model_state(model, sharded=True)
        if not context.is_main:
            return None
        model = build_model(config, train_set, tokenizer_path=tokenizer_path).to(context.device)
        model.load_state_dict(whole)
    return model if context.is_main else None


def _periodic_evaluation(config: TrainConfig, trainer: Trainer, splits, tokenizer_path: Path, say):
    """The evaluation every ``eval_every`` epochs (:mod:`.periodic_evaluation`), ``None`` for ``eval_every=0``;
    :class:`ConfigError` where the run has nothing to evaluate on."""
    if not config.eval_every:
        return None
    if splits.test is None and not (config.zero_shot_dir or config.retrieval_file):
        real_sets = "give zero_shot_dir=FOLDER or retrieval_file=FILE, or" if config.pipeline == "image_text" else "use"
        raise ConfigError(
            f"eval_every={config.eval_every}: dataset={config.dataset} has no test split to evaluate on; "
            f"{real_sets} eval_every=0"
        )
    during = dataclasses.replace(config, probe_baselines=False)  # the baselines do not train: the end measures them

    def measure() -> dict | None:
        model = _evaluated_model(config, trainer, splits.train, tokenizer_path)
        if model is None:
            return None
        results = evaluate(during, model, splits, trainer.context.device) if splits.test is not None else {}
        shape = trained_image_shape(config, splits.train)
        return {**results, **real_set_evaluation(during, model, trainer.context.device, shape)}

    return PeriodicEvaluation(config.eval_every, measure, trainer.parts.model, say)


def _earlier(config: TrainConfig, run_dir: Path):
    """The word-level tokenizer saved by the checkpoint of a run resumed from before WordPiece, else ``None``."""
    if not config.resume or (run_dir / TOKENIZER_FILE).is_file():
        return None
    checkpoint = latest_checkpoint(run_dir / "checkpoints")
    return None if checkpoint is None else earlier_tokenizer_of(checkpoint)


def _prepare_run_dir(run_dir: Path, config: TrainConfig, lock: RunLock) -> None:
    """Claim ``run_dir`` (creating it); refuse a new run where one was trained unless ``resume``."""
    lock.acquire()
    if not config.resume and latest_checkpoint(run_dir / "checkpoints") is not None:
        raise ConfigError(f"{run_dir} already holds a run; pass resume=true to continue it or name=... for a new one")


def micro_batch_norm_notice(model: nn.Module, micro_batch_size: int) -> str | None:
    """What a micro-batched run with batch norm should know, once: whose statistics its gradient uses."""
    layers = [name for name, module in model.named_modules() if isinstance(module, nn.modules.batchnorm._BatchNorm)]
    if not layers:
        return None
    shown = ", ".join(layers[:3]) + (f" and {len(layers) - 3} more" if len(layers) > 3 else "")
    return (
        f"note: micro_batch_size={micro_batch_size} with batch norm in the model ({shown}): each micro-batch is\n"
        "  normalized with its own statistics, so the gradient is the per-micro-batch one, not the whole batch's;\n"
        "  norm=none takes batch norm out of the MLP encoder and the projection head (projection_layers=1 has none)"
    )


def _printer(context: Distributed):
    def say(message: str) -> None:
        if context.is_main:
            print(message, file=sys.stderr, flush=True)

    return say


def _progress_bar(trainer: Trainer, config: TrainConfig, context: Distributed):
    if not (config.progress and context.is_main):
        return None
    return _Progress(progress(trainer.total_steps, initial=trainer.position.step, unit="step", stream=sys.stderr))


class _Progress:
    """Moves the progress report (a bar on a terminal, plain lines elsewhere) to the logged step, with its loss
    and throughput."""

    def __init__(self, report) -> None:
        self.report = report

    def update(self, row: dict, total: int) -> None:
        self.report.update(
            int(row["step"]), loss=f"{row['loss']:.4f}", samples_per_s=f"{row['samples_per_second']:.0f}"
        )

    def close(self) -> None:
        self.report.close()
