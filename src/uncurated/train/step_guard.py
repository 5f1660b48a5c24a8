"""What guards a training step against non-finite values: the state it changes, kept to be put back, and the check
of its gradients.

The trainer snapshots a :class:`StepRollback` before the forward pass; when the loss or a gradient
(:func:`gradients_finite`) is not finite on some process, every process restores it and skips the step.
"""

from __future__ import annotations

import torch
from torch import Tensor, nn

from ..objectives import Objective


class StepRollback:
    """What a step changes before its loss and gradients are known to be finite, kept to be put back.

    That is the model's buffers (batch-norm statistics, which the forward
    pass updates) and, for the global objectives, the per-sample rows the
    objective call writes (the objective undoes them, :meth:`~uncurated.objectives.Objective.undo_step`).
    """

    def __init__(self, model: nn.Module, objective: Objective) -> None:
        self.buffers = [(buffer, buffer.detach().clone()) for buffer in model.buffers()]
        self.objective = objective

    @torch.no_grad()
    def restore(self) -> None:
        for buffer, saved in self.buffers:
            buffer.copy_(saved)
        self.objective.undo_step()


class NonFiniteEmbeddings(Exception):
    """A step's embeddings hold a NaN or an inf: raised from within the objective call, where the trainer's check
    of them is read with the objective's (:func:`uncurated.host_reads.check_later`), before anything is written."""


def refuse_nonfinite_embeddings(finite: list[float]) -> None:
    """The trainer's check of the embeddings, once read: raise :class:`NonFiniteEmbeddings` if they are not."""
    if finite[0] != 1.0:
        raise NonFiniteEmbeddings


def gradients_finite(optimizer: torch.optim.Optimizer) -> Tensor:
    """Whether every gradient the optimizer would apply (this process's shards of them) is finite: a 0-d boolean
    on their device, not read (the trainer reads it with the loss, in one synchronization)."""
    grads = [_local(p.grad) for group in optimizer.param_groups for p in group["params"] if p.grad is not None]
    if not grads:
        return torch.ones((), dtype=torch.bool)
    return torch.stack([grad.isfinite().all() for grad in grads]).all()


def _local(tensor: Tensor) -> Tensor:
    """This process's shard of a tensor FSDP2 shards (a DTensor), or the tensor itself."""
    return tensor.to_local() if hasattr(tensor, "to_local") else tensor
