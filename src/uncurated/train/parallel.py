"""How the towers are spread over the training processes: PyTorch's DistributedDataParallel or FSDP2.

Under ``torchrun`` the towers are replicated by
:class:`~torch.nn.parallel.DistributedDataParallel` (``parallel=ddp``, the
default): each process embeds its share of the batch, and DDP averages the
gradients in buckets while the backward pass is still running. With
``parallel=fsdp`` they are sharded by FSDP2
(:func:`torch.distributed.fsdp.fully_shard`, each tower, then the whole):
each process holds ``1/W`` of the parameters, gathered for the forward and
backward passes and reduce-scattered after, for towers that do not fit one
device (``fsdp_mixed_precision``: in bf16, FSDP2's mixed-precision policies,
:data:`FSDP_POLICIES`). Either way the objective gathers the rest of the batch
itself (:mod:`uncurated.process.shard`) and returns the mean over the process's
rows, so the averaged gradients are one process's on the whole batch. An
objective that learns something (a temperature, SigLIP's bias) is wrapped in
DistributedDataParallel too; the global objectives learn nothing by gradient.

``sync_batch_norm=true`` converts batch normalization to
:class:`~torch.nn.SyncBatchNorm` (statistics over the global batch; CUDA
only, as torch's implementation is).

What the tower module is: :class:`Embedder`, the model's towers behind one
``forward`` (DDP hooks only ``forward``); the trainer augments a process's
whole share before it, so micro-batches see the whole batch's views.
Replicated (one process, DDP), a checkpoint holds the whole model and
optimizer state, written by the main process. Sharded (FSDP2), no process
ever holds the whole: each writes its own shards of the weights and of the
optimizer's state with :mod:`torch.distributed.checkpoint` (DCP,
:func:`save_shards`; with ``checkpoint_async``, :func:`save_shards_in_background` copies them to the host and
writes them while training goes on), and a resumed run, by any number of processes, reads
the pieces of its own shards (:func:`load_shards`: DCP reshards). The
optimizer's state is keyed by parameter name in every format (whole or
sharded; a checkpoint written before, keyed by position, still loads), so a
run resumes under any number of processes, in any order: sharded by two,
then whole in one, then sharded by two again.

DCP's reader unpickles two things: its ``.metadata`` file and any entry that
is not a tensor. Only tensors are given to DCP here (the optimizer's
``param_groups`` and the model's other entries go to the checkpoint's
safetensors state), the entries that are not tensors are refused
(:class:`_TensorsOnlyPlanner`), and ``.metadata`` is read by an unpickler that
builds DCP's own metadata classes and nothing else (:class:`_MetadataReader`).
"""

from __future__ import annotations

import inspect
import io
import pickle
import warnings
from collections.abc import Callable, Iterator
from concurrent.futures import Future
from contextlib import contextmanager
from pathlib import Path
from typing import Any, cast

import torch
from torch import Tensor, nn
from torch.distributed import ProcessGroup
from torch.distributed import checkpoint as dcp
from torch.distributed.checkpoint.api import CheckpointException
from torch.distributed.checkpoint.default_planner import DefaultLoadPlanner
from torch.distributed.checkpoint.metadata import StorageMeta, TensorStorageMetadata
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import FSDPModule, MixedPrecisionPolicy, fully_shard
from torch.nn.parallel import DistributedDataParallel

from ..models.encoders import TwoViewModel
from ..validation import check_choice
from .distributed import Distributed
from .sections import FSDP_MIXED_PRECISIONS
from .setting import ConfigError


class Embedder(nn.Module):
    """The towers as one module whose ``forward`` embeds a batch of (augmented) views, in float32.

    ``second`` is the batch's second views (``pipeline="two_view"``) or its
    captions (``"image_text"``); the towers run under bf16 autocast when
    ``bf16`` (the objective always runs in float32: its exponentials need the range).
    """

    def __init__(self, model: nn.Module, pipeline: str, bf16: bool) -> None:
        super().__init__()
        if pipeline == "two_view" and not isinstance(model, TwoViewModel):
            raise TypeError(f"{type(model).__name__} has no embed_views(first, second) for the two-view pipeline")
        self.model, self.pipeline, self.bf16 = model, pipeline, bf16

    def forward(self, first: Tensor, second) -> tuple[Tensor, Tensor]:
        with torch.autocast(device_type=first.device.type, dtype=torch.bfloat16, enabled=self.bf16):
            if self.pipeline == "two_view":
                a, b = cast(TwoViewModel, self.model).embed_views(first, second)
            else:
                a, b = self.model(first, second)
        return a.float(), b.float()


#: ``fsdp_mixed_precision``'s policies for FSDP2 (Zhao et al. 2023, "PyTorch FSDP", mixed precision): the parameters are
#: gathered, and the towers compute, in ``param_dtype``; the gradients are reduce-scattered in ``reduce_dtype``; the
#: sharded float32 parameters the optimizer updates, and the checkpoints, stay float32. ``none``: no policy.
FSDP_POLICIES = {
    "bf16": MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.bfloat16),
    "bf16_reduce_fp32": MixedPrecisionPolicy(param_dtype=torch.bfloat16, reduce_dtype=torch.float32),
}


def distribute_towers(
    embedder: Embedder, context: Distributed, parallel: str, sync_batch_norm: bool, fsdp_mixed_precision: str
) -> nn.Module:
    """``embedder`` as the training processes run it: itself alone, else wrapped by DDP or sharded by FSDP2 (with
    the policy :data:`FSDP_POLICIES` names ``fsdp_mixed_precision``, which only FSDP2 applies: refused elsewhere)."""
    policy = fsdp_policy(fsdp_mixed_precision, parallel if context.enabled else "one process")
    if sync_batch_norm:
        if context.device.type != "cuda":
            raise ValueError(
                f"sync_batch_norm=true needs CUDA (torch's SyncBatchNorm runs on GPUs only); the device is "
                f"{context.device.type}. Use norm=none or norm=layer on CPU, or sync_batch_norm=false"
            )
        embedder.model = nn.SyncBatchNorm.convert_sync_batchnorm(embedder.model)
    if not context.enabled:
        return embedder
    if parallel == "fsdp":
        for tower in _towers(embedder.model):
            fully_shard(tower, mp_policy=policy)
        return cast(nn.Module, fully_shard(embedder, mp_policy=policy))
    device_ids = [context.device.index] if context.device.type == "cuda" else None
    return DistributedDataParallel(embedder, device_ids=device_ids)


def fsdp_policy(name: str, sharding: str) -> MixedPrecisionPolicy:
    """The FSDP2 policy ``fsdp_mixed_precision=name`` names (float32 throughout for ``none``); refused unless the
    towers are ``sharding``: ``fsdp`` (not ``ddp``, nor ``one process``, where nothing is sharded)."""
    check_choice("fsdp_mixed_precision", name, FSDP_MIXED_PRECISIONS)
    if name == "none":
        return MixedPrecisionPolicy()
    if sharding != "fsdp":
        where = "runs in one process" if sharding == "one process" else f"has parallel={sharding}"
        raise ConfigError(
            f"fsdp_mixed_precision={name} is FSDP2's MixedPrecisionPolicy: it applies to parallel=fsdp under torchrun, "
            f"and this run {where}. Give fsdp_mixed_precision=none (a resume may change it), or precision=bf16 for "
            "bf16 autocast of the encoders"
        )
    return FSDP_POLICIES[name]


def distribute_objective(objective: nn.Module, context: Distributed) -> nn.Module:
    """``objective`` as the processes call it: wrapped by DDP where it learns something (its gradients are
    then averaged like the towers'), else itself. Its buffers (a fixed temperature) are equal on every process,
    and its per-sample state is not a buffer: DDP never copies them before a forward pass (:func:`buffers_unsynced`;
    from torch 2.13 it copies them from the first process once, at wrapping)."""
    if not (context.enabled and any(p.requires_grad for p in objective.parameters())):
        return objective
    device_ids = [context.device.index] if context.device.type == "cuda" else None
    return DistributedDataParallel(objective, device_ids=device_ids, **buffers_unsynced())


def buffers_unsynced() -> dict[str, Any]:
    """The keyword that stops DDP broadcasting a module's buffers before each forward pass, in the installed torch:
    ``forward_sync_buffers=False`` where DDP takes it (torch 2.13 and later, which deprecate the other), else
    ``broadcast_buffers=False``, which also leaves the buffers out of the copy made at wrapping."""
    accepted = inspect.signature(DistributedDataParallel.__init__).parameters
    return {"forward_sync_buffers" if "forward_sync_buffers" in accepted else "broadcast_buffers": False}


@contextmanager
def gradient_sync_deferred(module: nn.Module) -> Iterator[None]:
    """Backward passes inside accumulate gradients locally: DDP's ``no_sync``, FSDP2's
    ``set_requires_gradient_sync(False)``; the next backward pass outside reduces them all at once."""
    if isinstance(module, DistributedDataParallel):
        with module.no_sync():
            yield
        return
    if isinstance(module, FSDPModule):
        module.set_requires_gradient_sync(False)
        try:
            yield
        finally:
            module.set_requires_gradient_sync(True)
        return
    yield


def whole_model_state(model: nn.Module, sharded: bool) -> dict:
    """The model's whole ``state_dict()``: its own, or, sharded by FSDP2, the shards gathered onto the main
    process (every process must call; the others get an empty dict)."""
    if not sharded:
        return model.state_dict()
    return get_model_state_dict(model, options=StateDictOptions(full_state_dict=True, cpu_offload=True))


def load_whole_model_state(model: nn.Module, state: dict, sharded: bool) -> None:
    """Load a whole ``state_dict()`` (every process holds it) into ``model``, each process taking its shards."""
    if not sharded:
        model.load_state_dict(state, strict=True)
        return
    set_model_state_dict(model, state, options=StateDictOptions(full_state_dict=True, strict=True))


def whole_optimizer_state(modules: nn.Module, optimizer: torch.optim.Optimizer, sharded: bool) -> dict:
    """The optimizer's whole state keyed by parameter name (of ``modules``, which hold every optimized parameter),
    in every format alike: each parameter's state under its name, each group's parameters as their names. Sharded,
    the shards are gathered onto the main process (every process must call; the others get an empty dict)."""
    if not sharded:
        return _named(optimizer.state_dict(), _optimized_names(modules, optimizer))
    return get_optimizer_state_dict(
        modules, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )


def load_whole_optimizer_state(modules: nn.Module, optimizer: torch.optim.Optimizer, state: dict, sharded: bool):
    """Load what :func:`whole_optimizer_state` returned (every process holds it), or the state of a checkpoint
    written before, keyed by position (the parameters' order in the optimizer's groups, which the same
    configuration builds alike), whatever the number of processes that wrote it."""
    names = _optimized_names(modules, optimizer)
    if _by_position(state):
        state = _named(state, names)
    if not sharded:
        positions = {name: position for position, name in enumerate(names)}
        optimizer.load_state_dict(_named(state, positions))
        return
    set_optimizer_state_dict(modules, optimizer, state, options=StateDictOptions(full_state_dict=True))


def _optimized_names(modules: nn.Module, optimizer: torch.optim.Optimizer) -> list[str]:
    """The names, in ``modules``, of the optimizer's parameters in the order of its groups (the positions of its
    ``state_dict()``)."""
    names = {id(parameter): name for name, parameter in modules.named_parameters()}
    return [names[id(parameter)] for group in optimizer.param_groups for parameter in group["params"]]


def _by_position(state: dict) -> bool:
    """Whether an optimizer's state names its parameters by position (``Optimizer.state_dict()``)."""
    return any(isinstance(key, int) for group in state["param_groups"] for key in group["params"])


def _named(state: dict, keys) -> dict:
    """An optimizer's ``state`` with each parameter's key ``k`` replaced by ``keys[k]`` (positions to names, or,
    given a mapping of names, names to positions)."""
    groups = [{**group, "params": [keys[key] for key in group["params"]]} for group in state["param_groups"]]
    return {"state": {keys[key]: values for key, values in state["state"].items()}, "param_groups": groups}


def sharded_state(model: nn.Module, modules: nn.Module, optimizer: torch.optim.Optimizer) -> tuple[dict, dict]:
    """This process's shards of the model's and the optimizer's tensors, as :func:`save_shards` writes them, and
    what is not a tensor: the model's other ``state_dict()`` entries (``"model"``) and the optimizer's
    ``param_groups`` (parameters named by ``modules``; every process must call, none gathers)."""
    weights, extra = _split_tensors(get_model_state_dict(model))
    optimizer_state = get_optimizer_state_dict(modules, optimizer)
    tensors = {"model": weights, "optimizer": optimizer_state["state"]}
    return tensors, {"model": extra, "param_groups": optimizer_state["param_groups"]}


def save_shards(tensors: dict, folder: Path) -> None:
    """Write :func:`sharded_state`'s tensors into ``folder`` with DCP: each process its own shards (one file per
    process and ``.metadata``, written by the main one; every process must call)."""
    with _shard_write_errors(folder):
        dcp.save(tensors, storage_writer=dcp.FileSystemWriter(folder, single_file_per_rank=True))


def save_shards_in_background(
    tensors: dict, folder: Path, host_group: ProcessGroup, written: Callable[[], None] | None = None
) -> Callable[[], None]:
    """Start writing what :func:`save_shards` writes, with DCP's ``async_save``: the tensors are copied to the host
    before this returns (DCP stages them), then written by a thread of DCP's while training goes on, its collectives
    (the plan, the write's outcome) over ``host_group``, a gloo group apart from the training's. Returns the wait
    for the write, which raises ``OSError`` as :func:`save_shards` does, on every process (every process must call).
    ``written``: called in DCP's thread once this process's file is written, before DCP's ``.metadata`` is."""
    writer = dcp.FileSystemWriter(folder, single_file_per_rank=True)
    if written is not None:
        write_data = writer.write_data

        def write_then_tell(*args: Any, **kwargs: Any) -> Any:
            result = write_data(*args, **kwargs)
            written()
            return result

        writer.write_data = write_then_tell  # type: ignore[method-assign]
    with _shard_write_errors(folder):
        pending = dcp.async_save(tensors, storage_writer=writer, process_group=host_group)

    def wait() -> None:
        with _shard_write_errors(folder):
            cast(Future, pending).result()

    return wait


@contextmanager
def _shard_write_errors(folder: Path) -> Iterator[None]:
    """DCP's failed write, raised on every process when one failed (a full disk), as ``OSError``."""
    try:
        yield
    except CheckpointException as error:
        raise OSError(f"writing the shards into {folder} failed: {error}") from None


def load_shards(
    folder: Path,
    model: nn.Module,
    extra: dict,
    optimizer: tuple[nn.Module, torch.optim.Optimizer, list] | None = None,
) -> None:
    """Load the shards :func:`save_shards` wrote into ``folder`` into ``model`` (sharded by FSDP2 or whole, in
    any number of processes: each reads the pieces of its own shards), with its other entries ``extra``, and,
    given ``(modules, optimizer, param_groups)``, the optimizer's state; every process of a sharded run must call.
    Only tensors are read (see the module)."""
    weights, _ = _split_tensors(get_model_state_dict(model))
    tensors: dict[str, Any] = {"model": weights}
    if optimizer is not None:
        modules, torch_optimizer, groups = optimizer
        tensors["optimizer"] = get_optimizer_state_dict(modules, torch_optimizer)["state"]
    try:
        with warnings.catch_warnings():  # one process reading the whole model is what it is for
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.load(tensors, storage_reader=_MetadataReader(folder), planner=_TensorsOnlyPlanner())
    except CheckpointException as error:  # what failed on any process, raised on every one
        raise RuntimeError(f"reading the shards in {folder} failed: {error}") from None
    options = StateDictOptions(strict=True)
    set_model_state_dict(model, {**tensors["model"], **extra}, options=options)
    if optimizer is not None:
        modules, torch_optimizer, groups = optimizer
        state = {"state": tensors["optimizer"], "param_groups": groups}
        set_optimizer_state_dict(modules, torch_optimizer, state, options=options)


def read_whole_weights(folder: Path) -> dict[str, Tensor]:
    """The model's whole tensors from the shards :func:`save_shards` wrote into ``folder``, read in this process
    without the model (their names, sizes and dtypes from DCP's ``.metadata``): the whole model in memory, for an
    export, not for training."""
    reader = _MetadataReader(folder)
    prefix = "model."
    tensors: dict[str, Any] = {
        name[len(prefix) :]: torch.empty(entry.size, dtype=entry.properties.dtype)
        for name, entry in reader.metadata.state_dict_metadata.items()
        if name.startswith(prefix) and isinstance(entry, TensorStorageMetadata)
    }
    try:
        with warnings.catch_warnings():
            warnings.filterwarnings("ignore", message="torch.distributed is disabled")
            dcp.load({"model": tensors}, storage_reader=reader, planner=_TensorsOnlyPlanner())
    except CheckpointException as error:
        raise RuntimeError(f"reading the shards in {folder} failed: {error}") from None
    return tensors


def _split_tensors(state: dict) -> tuple[dict, dict]:
    tensors = {name: value for name, value in state.items() if isinstance(value, torch.Tensor)}
    return tensors, {name: value for name, value in state.items() if name not in tensors}


class _TensorsOnlyPlanner(DefaultLoadPlanner):
    """DCP's planner, refusing entries that are not tensors: DCP would unpickle them (``torch.load`` without
    its weights-only guard), which can run any code."""

    def load_bytes(self, read_item, value: io.BytesIO) -> None:
        raise pickle.UnpicklingError(
            f"the sharded checkpoint holds {read_item.dest_index.fqn} as pickled bytes, not a tensor: refused, "
            "since unpickling can run any code"
        )


_TORCH_CONSTANTS = (torch.dtype, torch.layout, torch.memory_format)
#: What else DCP's metadata names: where it was written (a path), a layout by its name.
_PLAIN = {("pathlib", "PosixPath"), ("pathlib", "WindowsPath"), ("torch.serialization", "_get_layout")}


class _MetadataUnpickler(pickle.Unpickler):
    """Builds DCP's metadata classes, torch's sizes, dtypes, layouts and memory formats and paths, nothing else
    (no function but the one torch pickles a layout with, which looks the layout up by name)."""

    def find_class(self, module: str, name: str) -> Any:
        if module.startswith("torch.distributed.checkpoint.") or (module, name) == ("torch", "Size"):
            found = super().find_class(module, name)
            if isinstance(found, type):
                return found
        if module == "torch" and isinstance(getattr(torch, name, None), _TORCH_CONSTANTS):
            return getattr(torch, name)
        if (module, name) in _PLAIN:
            return super().find_class(module, name)
        raise pickle.UnpicklingError(
            f"the sharded checkpoint's .metadata names {module}.{name}, which DCP's metadata never holds: refused, "
            "since unpickling it could run code"
        )


class _MetadataReader(dcp.FileSystemReader):
    """DCP's reader, with its ``.metadata`` (a pickle) read by :class:`_MetadataUnpickler` once, when the reader
    is made, so that a refusal is raised as itself: DCP's load catches what ``read_metadata`` raises and reports
    only ``metadata is None`` (torch 2.11; 2.13 appends the cause)."""

    def __init__(self, folder: Path) -> None:
        super().__init__(folder)
        try:
            with self.fs.create_stream(self._get_metadata_path(), "rb") as file:
                self.metadata = _MetadataUnpickler(file).load()
        except (OSError, EOFError) as error:
            raise RuntimeError(f"reading the shards in {folder} failed: {type(error).__name__}: {error}") from None
        if getattr(self.metadata, "storage_meta", None) is None:
            self.metadata.storage_meta = StorageMeta()

    def read_metadata(self, *args: Any, **kwargs: Any) -> Any:
        self.metadata.storage_meta.load_id = self.load_id
        return self.metadata


def _towers(model: nn.Module) -> list[nn.Module]:
    """The model's parts FSDP2 shards one by one: its direct children that hold parameters."""
    return [child for child in model.children() if any(True for _ in child.parameters())]
