"""Checkpoints that are never half-written, verified by checksum, and never execute code when read.

A checkpoint is a folder ``step-XXXXXXXX`` in the run's ``checkpoints/``
holding:

* ``model.safetensors``: the model's tensors, loadable without this package;
* ``state.safetensors``: the training state (optimizer, schedule, data
  position, and every process's random generators and skipped-item counts,
  gathered by the main process) and the model's state
  entries that are not tensors (a tokenizer's vocabulary), written by
  :mod:`uncurated.train.state_codec`: its tensors as tensors, the rest as
  typed JSON in the file's header;
* ``objective-RRRRR-of-PPPPP.safetensors``, one per training process: the
  objective's state as process ``R`` of ``P`` held it (the global
  objectives' per-sample rows are split across processes,
  :mod:`uncurated.state.store`), written by that process, in the same
  encoding. A run resumed by another number of processes reads the files
  whose rows it needs;
* ``sharded/``, in place of ``model.safetensors``, when the run shards its
  model (``parallel=fsdp``): each process's shards of the weights and of the
  optimizer's state, written by :mod:`torch.distributed.checkpoint` (DCP,
  :mod:`.parallel`): one ``__R_0.distcp`` per process and DCP's ``.metadata``,
  listed in the manifest like the other files. Such a checkpoint has format
  :data:`SHARDED_FORMAT`. The shards carry no header of the run's identity:
  ``state.safetensors``, which does, names them with their checksums in its
  header (``sharded``), so a shard of another run or step is refused as a
  file of another run is;
* ``manifest.json``: ``format`` (:data:`FORMAT`), the step, the run's
  identity (``run``, made once when the run starts and kept when it
  resumes), the number of objective files (``processes``), the size and
  SHA-256 of every other file, and ``metadata`` such as the run's
  configuration.

Every safetensors file of the folder also carries the run and the step in its
header metadata (``run``, ``step``), written by the process that wrote the
file. A file whose run or step is not its manifest's (a process's file copied
in from another run or another step, the manifest re-hashed to match) is
refused with a :class:`CheckpointIdentityError` naming both; unlike damage,
this is never passed over for an older checkpoint. Format 4 folders written
before the identity (no ``run`` in the manifest) are read without the check.

Format 2 (before the objective files) kept the objective's state in
``state.safetensors``, and formats 2 and 3 the main process's generators and
counts only; both are still read. None of the safetensors files can hold
code. DCP's ``.metadata`` is a pickle: it is read by an unpickler that builds
DCP's metadata classes only, and only tensors are read from the shards
(:mod:`.parallel`), so a forged one is refused, not run; DCP's own reader
would run it. (The checksums guard against
damage only: the manifest sits beside the files it describes.) Folders of the
first format, written by uncurated before this one, kept the training state
in ``state.pt``, a pickle, which can run any code when it is loaded; they are
refused with a :class:`CheckpointError` saying what to do, and never
unpickled.

A checkpoint is written into a temporary folder (:func:`prepare_checkpoint`;
each process adds its objective file, :func:`write_objective_state`; the main
one the rest, :func:`publish_checkpoint`), fsynced, and renamed into
place; ``checkpoints/latest`` (a one-line file naming the newest folder, for
tools that look) is replaced atomically afterwards. A crash at any moment
therefore leaves every published folder complete. Folders older than the
``keep`` newest, folders of steps after the one just written (left by a
timeline that a resumed run abandoned) and temporary folders of killed writes
are removed only after the new one is in place.

Reading trusts nothing: :func:`latest_checkpoint` takes the newest folder
whose files match their manifest, warning (:class:`CheckpointWarning`, naming
the file and the step fallen back to) about each newer one that does not (a
file missing or damaged), and the readers verify every file's size and the
checksums of the files they load (each once, :mod:`.file_hashes`). A writer
hashes its own files for the main process (:func:`describe_written`).

Test hook: the environment variable ``UNCURATED_CHECKPOINT_FAULT=STEP:STAGE``
makes the process kill itself with SIGKILL while writing the checkpoint of
step ``STEP``, right after ``STAGE``: ``weights`` or ``state`` (a file written
into the temporary folder), ``manifest``, ``published`` (the folder renamed
into place, ``latest`` not yet updated) or ``pointer`` (``latest`` updated, old
folders not yet removed); ``shards``: under ``parallel=fsdp`` with ``checkpoint_async``, the last process, once its
shards are written in the background, before DCP's ``.metadata`` is and before any process hashed its files. The
fault tests use it to kill a run inside a checkpoint write deterministically; it has no other use.
"""

from __future__ import annotations

import json
import os
import secrets
import shutil
import signal
import tempfile
import warnings
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

import torch
from safetensors import SafetensorError, safe_open
from safetensors.torch import load_file, save_file
from torch import nn

from ..errors import RunStopped
from ..objectives.base import Objective
from . import file_hashes
from .durable_files import replace_durably, sync_tree, write_durably
from .state_codec import StateFormatError, load_state, save_state

LATEST = "latest"
MODEL_EXTRA = "model_extra_state"
WEIGHTS = "model.safetensors"
STATE = "state.safetensors"
MANIFEST = "manifest.json"
#: The folder of a sharded checkpoint's weights and optimizer state, written by DCP (:mod:`.parallel`).
SHARDS = "sharded"
PREFIX = "step-"

#: The on-disk format this version writes, recorded in each manifest (see the module), and those it reads.
FORMAT = 4
#: The format of a sharded checkpoint (``sharded/`` in place of ``model.safetensors``): versions that read format 4
#: refuse it by its format, saying which they read, rather than call it incomplete and fall back.
SHARDED_FORMAT = 5
READABLE_FORMATS = (2, 3, 4, 5)
#: The pickled training state of the first format, which is refused, never loaded.
LEGACY_STATE = "state.pt"
#: The file in which DCP describes the shards (a pickle, read by a restricted unpickler: :mod:`.parallel`).
DCP_METADATA = ".metadata"

#: The environment variable of the test hook (see the module's documentation) and its stages.
FAULT_VARIABLE = "UNCURATED_CHECKPOINT_FAULT"
#: The publish's stages; ``shards``, the writers' (see the module), is not one.
FAULT_STAGES = ("weights", "state", "manifest", "published", "pointer")


class CheckpointError(RunStopped, RuntimeError):
    """A checkpoint that cannot be used: files missing, sizes or checksums wrong, an unreadable or older
    format, nothing valid left."""


class CheckpointIdentityError(CheckpointError):
    """A file of a checkpoint was not written by the run and at the step its manifest says: another run's, another
    step's, or no checkpoint file at all (its checksum rewritten to match)."""


class CheckpointWarning(UserWarning):
    """A checkpoint was passed over: corrupt, incomplete, or of a format this version does not load."""


def save_checkpoint(
    directory: Path,
    step: int,
    model: nn.Module,
    state: dict[str, Any],
    *,
    keep: int = 2,
    metadata: dict[str, Any] | None = None,
    objective_state: dict[str, Any] | None = None,
    run: str | None = None,
) -> Path:
    """Write ``model``'s weights and ``state`` as the checkpoint of ``step`` from one process; return its folder.

    ``objective_state``, if given, is written as the objective file of process
    0 of 1. ``run`` is the run's identity (:func:`new_run_id`), a new one if
    not given. ``state`` may hold what :mod:`uncurated.train.state_codec`
    encodes (tensors, numbers, strings, lists, tuples, dicts), as may the
    entries of ``model.state_dict()`` that are not tensors; anything else
    raises ``TypeError`` naming the entry, before anything is published.
    ``metadata`` (JSON-serializable) is stored in the manifest, where
    :func:`read_manifest` reads it without loading the state. An error while
    writing (a full disk) propagates after the temporary folder is removed;
    the checkpoints already published are untouched.
    """
    run = run or new_run_id()
    staging = prepare_checkpoint(directory, step)
    try:
        if objective_state is not None:
            write_objective_state(staging, 0, 1, objective_state, run=run, step=step)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    processes = 0 if objective_state is None else 1
    return publish_checkpoint(
        directory,
        staging,
        step,
        model.state_dict(),
        state,
        processes=processes,
        run=run,
        keep=keep,
        metadata=metadata,
    )


def new_run_id() -> str:
    """A new run identity: 16 random hexadecimal digits."""
    return secrets.token_hex(8)


def _identity(run: str, step: int) -> dict[str, str]:
    """The header metadata that says which run wrote a checkpoint's file, and at which step."""
    return {"run": run, "step": str(step)}


def prepare_checkpoint(directory: Path, step: int) -> Path:
    """A new temporary folder in ``directory`` for the checkpoint of ``step`` (main process)."""
    directory.mkdir(parents=True, exist_ok=True)
    return Path(tempfile.mkdtemp(prefix=f".{PREFIX}{step:08d}-", dir=directory))


def objective_file(rank: int, processes: int) -> str:
    """The name of the objective file of process ``rank`` of ``processes``."""
    return f"objective-{rank:05d}-of-{processes:05d}.safetensors"


def write_objective_state(
    staging: Path, rank: int, processes: int, state: dict[str, Any], *, run: str, step: int
) -> None:
    """Write this process's objective state into the temporary folder ``staging`` of the checkpoint of ``step``
    of the run ``run`` (every process)."""
    save_state(state, staging / objective_file(rank, processes), label=_identity(run, step))


def publish_checkpoint(
    directory: Path,
    staging: Path,
    step: int,
    model_state: Mapping[str, Any],
    state: dict[str, Any],
    *,
    processes: int,
    run: str,
    keep: int = 2,
    metadata: dict[str, Any] | None = None,
    sharded: bool = False,
    described: Mapping[str, dict[str, Any]] | None = None,
) -> Path:
    """Add the weights (the model's whole ``state_dict()``), ``state`` and the manifest to ``staging`` (which
    holds the ``processes`` objective files) and publish it as the checkpoint of ``step`` of the run ``run``
    (main process); see :func:`save_checkpoint`. ``sharded``: the processes wrote the weights as shards into
    ``staging/sharded`` (:data:`SHARDS`); ``model_state`` then holds the model's entries that are not tensors.
    ``described``: the sizes and checksums of files the other processes wrote and hashed (:func:`describe_written`),
    by name, taken as they are rather than read again."""
    described = dict(described or {})

    def describe(name: str) -> dict[str, Any]:
        return described[name] if name in described else file_hashes.describe_file(staging / name)

    final = directory / f"{PREFIX}{step:08d}"
    identity = _identity(run, step)
    try:
        weights, extra = _split_state(model_state)
        if sharded:
            if weights:
                raise ValueError("a sharded checkpoint's weights are its shards, not model_state's tensors")
        else:
            save_file(weights, staging / WEIGHTS, metadata=identity)
        fault_point(step, "weights")
        shards = {name: describe(name) for name in _shard_files(staging)} if sharded else {}
        # The shards carry no header: the training state, which does, names their checksums.
        label = {**identity, SHARDS: json.dumps(shards, sort_keys=True)} if sharded else identity
        save_state({**state, MODEL_EXTRA: extra}, staging / STATE, label=label)
        fault_point(step, "state")
        weights_file = [] if sharded else [WEIGHTS]  # the shards are described above
        names = [*weights_file, STATE, *(objective_file(rank, processes) for rank in range(processes))]
        manifest = {
            "format": SHARDED_FORMAT if sharded else FORMAT,
            "step": step,
            "run": run,
            "processes": processes,
            "files": {**shards, **{name: describe(name) for name in names}},
        }
        write_durably(staging / MANIFEST, json.dumps({**manifest, "metadata": metadata or {}}, indent=1))
        fault_point(step, "manifest")
        sync_tree(staging)
        if final.exists():
            shutil.rmtree(final)
        os.replace(staging, final)
    except BaseException:
        shutil.rmtree(staging, ignore_errors=True)
        raise
    fault_point(step, "published")
    replace_durably(directory / LATEST, final.name + "\n")
    fault_point(step, "pointer")
    _prune(directory, step, keep)
    return final


def describe_written(staging: Path, rank: int, processes: int) -> dict[str, dict[str, Any]]:
    """The sizes and checksums of the files process ``rank`` of ``processes`` wrote into ``staging``, by the names
    the manifest gives them: its objective file and its DCP shards (``__RANK_*.distcp``), for the main process's
    :func:`publish_checkpoint`."""
    names = [objective_file(rank, processes)]
    names += [name for name in _shard_files(staging) if Path(name).name.startswith(f"__{rank}_")]
    return {name: file_hashes.describe_file(staging / name) for name in names if (staging / name).is_file()}


def abandon_checkpoint(staging: Path) -> None:
    """Remove a temporary folder whose checkpoint will not be published (a process failed to write)."""
    shutil.rmtree(staging, ignore_errors=True)


def latest_checkpoint(directory: Path) -> Path | None:
    """The newest valid checkpoint folder in ``directory``, or ``None`` if the run has none yet.

    Newer folders that fail verification (a file missing or damaged) are
    passed over with a :class:`CheckpointWarning` naming the problem and the
    step fallen back to. If folders exist but none is valid,
    :class:`CheckpointError` lists what is wrong with each. A folder holding a
    file of another run or step raises :class:`CheckpointIdentityError`: that
    is no accident of storage, and falling back would hide it.
    """
    problems = []
    for folder in _step_folders(directory)[::-1]:
        try:
            verify_checkpoint(folder)
        except CheckpointIdentityError:
            raise
        except CheckpointError as error:
            problems.append(str(error))
            continue
        for problem in problems:
            warnings.warn(
                f"{problem}; falling back to the checkpoint of step {read_manifest(folder).get('step')}, {folder}",
                CheckpointWarning,
                stacklevel=2,
            )
        return folder
    if problems:
        raise CheckpointError(f"no valid checkpoint in {directory}:\n  " + "\n  ".join(problems))
    return None


def verify_checkpoint(folder: Path, names: Iterable[str] | None = None) -> None:
    """Raise :class:`CheckpointError` unless ``folder`` is a checkpoint of :data:`READABLE_FORMATS` whose files
    exist and match their manifest, and :class:`CheckpointIdentityError` if one of them was written by another run
    or at another step than the manifest says. A folder of the first format (a pickled ``state.pt``) is refused.

    ``names``: the files whose checksums are compared (those the caller loads; default: all); every file's size
    is compared either way."""
    if (folder / LEGACY_STATE).exists():
        raise CheckpointError(
            f"checkpoint {folder} was written by an older uncurated: its training state is {LEGACY_STATE}, a "
            "pickle, which can run any code when loaded, so this version does not load it. Retrain the run; "
            "or, only if you trust whoever wrote the folder, convert it with "
            f"`python scripts/convert_checkpoint.py --trusted {folder}`"
        )
    if not (folder / MANIFEST).is_file():
        raise CheckpointError(f"checkpoint {folder} is incomplete: {MANIFEST} is missing")
    manifest = read_manifest(folder)
    sharded = manifest.get("format") == SHARDED_FORMAT
    for name in (STATE,) if sharded else (WEIGHTS, STATE):
        if not (folder / name).is_file():
            raise CheckpointError(f"checkpoint {folder} is incomplete: {name} is missing")
    if manifest.get("format") not in READABLE_FORMATS:
        raise CheckpointError(
            f"checkpoint {folder} has format {manifest.get('format')!r} in its {MANIFEST}; "
            f"this version of uncurated reads formats {', '.join(map(str, READABLE_FORMATS))}"
        )
    processes = manifest.get("processes", 0)
    if isinstance(processes, bool) or not isinstance(processes, int) or processes < 0:
        raise CheckpointError(
            f"checkpoint {folder} is corrupt: its {MANIFEST} gives {processes!r} processes, not an integer >= 0"
        )
    model_files = [name for name in manifest["files"] if name.startswith(f"{SHARDS}/")] if sharded else [WEIGHTS]
    if sharded and f"{SHARDS}/{DCP_METADATA}" not in model_files:
        raise CheckpointError(f"checkpoint {folder} is corrupt: its {MANIFEST} lists no {SHARDS}/{DCP_METADATA}")
    expected_files = [*model_files, STATE, *(objective_file(rank, processes) for rank in range(processes))]
    if set(manifest["files"]) != set(expected_files):
        raise CheckpointError(
            f"checkpoint {folder} is corrupt: its {MANIFEST} lists {sorted(manifest['files'])}, "
            f"not {sorted(expected_files)} (the files of {processes} processes)"
        )
    for rank in range(processes):
        name = objective_file(rank, processes)
        if not (folder / name).is_file():
            raise CheckpointError(
                f"checkpoint {folder} is incomplete: {name} is missing, the objective state of process {rank} of the "
                f"{processes} that wrote it (the files of processes 0 to {processes - 1} are all needed)"
            )
    if sharded and sorted(model_files) != _shard_files(folder):
        raise CheckpointError(
            f"checkpoint {folder} is incomplete: {SHARDS}/ holds {_shard_files(folder)}, its {MANIFEST} lists "
            f"{sorted(model_files)}"
        )
    hashed = set(manifest["files"] if names is None else names)
    for name, expected in manifest["files"].items():
        said = expected if isinstance(expected, dict) else {}
        if name not in hashed and (folder / name).stat().st_size == said.get("bytes"):
            continue
        found = file_hashes.described(folder / name)
        if found != expected:
            raise CheckpointError(
                f"checkpoint {folder} is corrupt: {name} has {found['bytes']} bytes and SHA-256 "
                f"{found['sha256'][:12]}..., its manifest says {said.get('bytes')} bytes and "
                f"{str(said.get('sha256'))[:12]}..."
            )
    if "run" in manifest:  # written with the identity; earlier folders of format 4 have none
        for name in manifest["files"]:
            if not name.startswith(f"{SHARDS}/"):  # DCP's files carry no header of ours
                _check_identity(folder, name, manifest["run"], manifest.get("step"))
        if sharded:
            _check_shards(folder, {name: manifest["files"][name] for name in model_files})


def _check_identity(folder: Path, name: str, run: Any, step: Any) -> None:
    """Raise :class:`CheckpointIdentityError` unless the file ``name`` of ``folder`` says it was written by the run
    ``run`` at ``step``."""
    try:
        with safe_open(folder / name, framework="pt", device="cpu") as file:
            header = file.metadata() or {}
    except (SafetensorError, OSError) as error:  # it matches its checksum: put there, not damaged
        raise CheckpointIdentityError(
            f"checkpoint {folder} holds a file that is not its own: {name} is not a safetensors file ({error}), yet "
            f"it matches its {MANIFEST}; it is refused, not loaded"
        ) from None
    expected = _identity(str(run), step)
    found = {key: header.get(key) for key in expected}
    if found != expected:
        raise CheckpointIdentityError(
            f"checkpoint {folder} holds a file of another run or step: {name} says run {found['run']}, step "
            f"{found['step']}; its {MANIFEST} says run {expected['run']}, step {expected['step']}. The folder was "
            "put together from several checkpoints; it is refused, not loaded. Remove it, or restore the file "
            "it was written with"
        )


def _check_shards(folder: Path, shards: dict[str, Any]) -> None:
    """Raise :class:`CheckpointIdentityError` unless the training state of ``folder`` (whose run and step are
    checked) names the shards ``shards`` (the manifest's) with the same checksums: a shard copied in from another
    run or step, the manifest re-hashed, differs from what the run wrote."""
    with safe_open(folder / STATE, framework="pt", device="cpu") as file:
        recorded = (file.metadata() or {}).get(SHARDS)
    try:
        written = json.loads(recorded) if recorded is not None else None
    except ValueError:
        written = None
    if not isinstance(written, dict):
        raise CheckpointIdentityError(f"checkpoint {folder} is sharded, yet its {STATE} names no shards")
    for name in sorted(set(shards) | set(written)):
        if shards.get(name) != written.get(name):
            raise CheckpointIdentityError(
                f"checkpoint {folder} holds a shard its run did not write at this step: {name} is not the file its "
                f"{STATE} names (written by run {checkpoint_run(folder)} with the shards). The folder was put "
                "together from several checkpoints; it is refused, not loaded. Remove it, or restore the file it was "
                "written with"
            )


def read_manifest(folder: Path) -> dict[str, Any]:
    """The manifest of the checkpoint ``folder``: ``format``, ``step``, ``files`` and ``metadata``."""
    try:
        manifest = json.loads((folder / MANIFEST).read_text())
        if not isinstance(manifest.get("files"), dict):
            raise ValueError("no files listed")
    except (OSError, ValueError, AttributeError) as error:
        raise CheckpointError(f"checkpoint {folder} has an unreadable {MANIFEST}: {error}") from error
    return manifest


def checkpoint_processes(folder: Path) -> int:
    """The number of objective files of the checkpoint ``folder`` (its training processes; 0 for format 2,
    whose objective state is in its training state)."""
    return int(read_manifest(folder).get("processes", 0))


def checkpoint_run(folder: Path) -> str | None:
    """The identity of the run that wrote the checkpoint ``folder`` (``None`` for folders written before it)."""
    run = read_manifest(folder).get("run")
    return None if run is None else str(run)


def load_objective_state(folder: Path, objective: Objective, state: dict[str, Any]) -> None:
    """Load the objective's state of the checkpoint ``folder`` into ``objective``, for this process: from the
    objective files of the saved processes it needs (:meth:`~uncurated.objectives.Objective.saved_state_ranks`),
    or, format 2, from ``state`` (the training state, whose ``"objective"`` entry it removes)."""
    processes = checkpoint_processes(folder)
    if processes == 0:
        objective.load_state_dict(state.pop("objective"))
        return
    states = read_objective_states(folder, objective.saved_state_ranks(processes))
    try:
        objective.load_saved_states(states, processes)
    except ValueError as error:
        raise CheckpointError(f"checkpoint {folder} holds objective states this run cannot use: {error}") from error


def read_objective_states(folder: Path, ranks: list[int] | None = None) -> dict[int, dict[str, Any]]:
    """The objective states the processes ``ranks`` (default: all) saved in the checkpoint ``folder``, by rank
    (format 3 on; verified first)."""
    processes = checkpoint_processes(folder)
    chosen = range(processes) if ranks is None else ranks
    verify_checkpoint(folder, [objective_file(rank, processes) for rank in chosen])
    states = {}
    for rank in chosen:
        try:
            states[rank] = load_state(folder / objective_file(rank, processes))
        except StateFormatError as error:
            raise CheckpointError(f"checkpoint {folder} is corrupt: {error}") from None
    return states


def checkpoint_metadata(folder: Path) -> dict[str, Any]:
    """The ``metadata`` saved in the manifest of the checkpoint ``folder``."""
    return read_manifest(folder).get("metadata", {})


def load_checkpoint(folder: Path, model: nn.Module) -> dict[str, Any]:
    """Verify ``folder``, load its weights into ``model`` (strictly) and return its training state."""
    model_state, state = read_checkpoint(folder)
    model.load_state_dict(model_state, strict=True)
    return state


def read_checkpoint(folder: Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """Verify ``folder`` and return the model's whole ``state_dict()`` and the training state (of a checkpoint
    whose weights are ``model.safetensors``; a sharded one's are read by
    :func:`~uncurated.train.parallel.load_shards`)."""
    if sharded_weights(folder) is not None:
        raise CheckpointError(
            f"checkpoint {folder} holds its weights as shards ({SHARDS}/, written by parallel=fsdp), not {WEIGHTS}"
        )
    verify_checkpoint(folder, [STATE, WEIGHTS])
    state = _load_training_state(folder)
    extra = state.pop(MODEL_EXTRA, None)
    if not isinstance(extra, dict):
        raise CheckpointError(f"checkpoint {folder} is corrupt: {STATE} lacks the model's {MODEL_EXTRA}")
    try:
        weights = load_file(folder / WEIGHTS)
    except (SafetensorError, OSError) as error:
        raise CheckpointError(f"checkpoint {folder} is corrupt: {WEIGHTS} cannot be read ({error})") from None
    return {**weights, **extra}, state


def read_training_state(folder: Path, *, with_shards: bool = False) -> dict[str, Any]:
    """Verify ``folder`` and return its training state (the model's non-tensor entries under ``MODEL_EXTRA``),
    without a model; raises :class:`CheckpointError` naming the folder when it cannot be used. ``with_shards``:
    its DCP shards are verified too (for :func:`~uncurated.train.parallel.load_shards`, which reads them next)."""
    shards = [name for name in read_manifest(folder)["files"] if name.startswith(f"{SHARDS}/")] if with_shards else []
    verify_checkpoint(folder, [STATE, *shards])
    return _load_training_state(folder)


def _load_training_state(folder: Path) -> dict[str, Any]:
    """The training state of a verified ``folder``."""
    try:
        return load_state(folder / STATE)
    except StateFormatError as error:
        raise CheckpointError(f"checkpoint {folder} is corrupt: {error}") from None


def _split_state(model_state: Mapping[str, Any]) -> tuple[dict[str, torch.Tensor], dict[str, Any]]:
    """The model's tensors (for ``model.safetensors``) and its other state entries (saved with the state)."""
    weights, extra = {}, {}
    for name, value in model_state.items():
        if isinstance(value, torch.Tensor):
            weights[name] = value.detach().cpu().contiguous()
        else:
            extra[name] = value
    return weights, extra


def sharded_weights(folder: Path) -> Path | None:
    """The folder of the DCP shards of the checkpoint ``folder`` (its weights and optimizer state, read with
    :func:`uncurated.train.parallel.load_shards`), or ``None`` when its weights are ``model.safetensors``."""
    return folder / SHARDS if read_manifest(folder).get("format") == SHARDED_FORMAT else None


def _shard_files(folder: Path) -> list[str]:
    """The files DCP wrote into ``folder/sharded``, as the manifest names them."""
    shards = folder / SHARDS
    return sorted(f"{SHARDS}/{path.name}" for path in shards.iterdir()) if shards.is_dir() else []


def _step_folders(directory: Path) -> list[Path]:
    """The published checkpoint folders of ``directory``, oldest first."""
    if not directory.is_dir():
        return []
    return sorted(path for path in directory.glob(f"{PREFIX}*") if path.is_dir())


def _prune(directory: Path, step: int, keep: int) -> None:
    """Remove all but the ``keep`` newest folders up to ``step``, every folder after it, and the temporary
    folders of writes that were killed (the run's lock makes this process the only writer)."""
    folders = _step_folders(directory)
    current = f"{PREFIX}{step:08d}"
    older = [path for path in folders if path.name <= current]
    newer = [path for path in folders if path.name > current]
    abandoned = [path for path in directory.glob(f".{PREFIX}*") if path.is_dir()]
    for old in older[: max(len(older) - keep, 0)] + newer + abandoned:
        shutil.rmtree(old, ignore_errors=True)


def fault_point(step: int, stage: str) -> None:
    """The test hook: SIGKILL this process if ``UNCURATED_CHECKPOINT_FAULT`` names ``step`` and ``stage``."""
    if fault_armed(step, stage):
        os.kill(os.getpid(), signal.SIGKILL)


def fault_armed(step: int, stage: str) -> bool:
    """Whether ``UNCURATED_CHECKPOINT_FAULT`` names ``step`` and ``stage`` (the test hook)."""
    return os.environ.get(FAULT_VARIABLE) == f"{step}:{stage}"
