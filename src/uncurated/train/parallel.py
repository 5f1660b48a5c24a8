"""How the towers are spread over the training processes: PyTorch's DistributedDataParallel or FSDP2.

Under ``torchrun`` the towers are replicated by
:class:`~torch.nn.parallel.DistributedDataParallel` (``parallel=ddp``, the
default): each process embeds its share of the batch, and DDP averages the
gradients in buckets while the backward pass is still running. With
``parallel=fsdp`` they are sharded by FSDP2
(:func:`torch.distributed.fsdp.fully_shard`, each tower, then the whole):
each process holds ``1/W`` of the parameters, gathered for the forward and
backward passes and reduce-scattered after, for towers that do not fit one
device. Either way the objective gathers the rest of the batch itself
(:mod:`uncurated.objectives.shard`) and returns the mean over the process's
rows, so the averaged gradients are one process's on the whole batch. An
objective that learns something (a temperature, SigLIP's bias) is wrapped in
DistributedDataParallel too; the global objectives learn nothing by gradient.

``sync_batch_norm=true`` converts batch normalization to
:class:`~torch.nn.SyncBatchNorm` (statistics over the global batch; CUDA
only, as torch's implementation is).

What the tower module is: :class:`Embedder`, the model's towers behind one
``forward`` (DDP hooks only ``forward``); the trainer augments a process's
whole share before it, so micro-batches see the whole batch's views.
Checkpoints hold the whole model and optimizer state either way: sharded,
the main process gathers them (:func:`whole_model_state`) and each process
takes its shards back when a run resumes. The optimizer's state is then
keyed by parameter name, not position, so a run keeps its ``parallel`` when
it resumes.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from typing import cast

import torch
from torch import Tensor, nn
from torch.distributed.checkpoint.state_dict import (
    StateDictOptions,
    get_model_state_dict,
    get_optimizer_state_dict,
    set_model_state_dict,
    set_optimizer_state_dict,
)
from torch.distributed.fsdp import FSDPModule, fully_shard
from torch.nn.parallel import DistributedDataParallel

from ..models.encoders import TwoViewModel
from .distributed import Distributed


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


def distribute_towers(embedder: Embedder, context: Distributed, parallel: str, sync_batch_norm: bool) -> nn.Module:
    """``embedder`` as the training processes run it: itself alone, else wrapped by DDP or sharded by FSDP2."""
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
            fully_shard(tower)
        return cast(nn.Module, fully_shard(embedder))
    device_ids = [context.device.index] if context.device.type == "cuda" else None
    return DistributedDataParallel(embedder, device_ids=device_ids)


def distribute_objective(objective: nn.Module, context: Distributed) -> nn.Module:
    """``objective`` as the processes call it: wrapped by DDP where it learns something (its gradients are
    then averaged like the towers'), else itself."""
    if not (context.enabled and any(p.requires_grad for p in objective.parameters())):
        return objective
    device_ids = [context.device.index] if context.device.type == "cuda" else None
    return DistributedDataParallel(objective, device_ids=device_ids, broadcast_buffers=False)


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
    """The optimizer's state: its ``state_dict()``, or, sharded, the shards gathered onto the main process by
    parameter name (of ``modules``, which hold every optimized parameter; every process must call)."""
    if not sharded:
        return optimizer.state_dict()
    return get_optimizer_state_dict(
        modules, optimizer, options=StateDictOptions(full_state_dict=True, cpu_offload=True)
    )


def load_whole_optimizer_state(modules: nn.Module, optimizer: torch.optim.Optimizer, state: dict, sharded: bool):
    """Load what :func:`whole_optimizer_state` returned (every process holds it)."""
    if not sharded:
        optimizer.load_state_dict(state)
        return
    set_optimizer_state_dict(modules, optimizer, state, options=StateDictOptions(full_state_dict=True))


def _towers(model: nn.Module) -> list[nn.Module]:
    """The model's parts FSDP2 shards one by one: its direct children that hold parameters."""
    return [child for child in model.children() if any(True for _ in child.parameters())]
