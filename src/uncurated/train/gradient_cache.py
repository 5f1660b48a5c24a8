"""Gradient caching: the exact gradient of a large batch, holding one micro-batch's activations at a time.

A contrastive objective couples every sample of a batch with every other, so
accumulating the gradients of smaller batches changes the objective (each
would see only its own negatives). The objective's gradient with respect to
the *embeddings* is small, though (B x d), and below the embeddings the chain
rule separates the samples (Gao et al. 2021, "Scaling deep contrastive
learning batch size under memory limited setup"). A step therefore:

1. embeds the batch micro-batch by micro-batch without keeping the graph
   (:meth:`GradientCache.embed`);
2. evaluates the objective once, on all the embeddings, and back-propagates
   it to them (the caller: the embeddings are leaves that require gradients);
3. embeds each micro-batch again, with its graph, and back-propagates its
   slice of the embeddings' gradient (:meth:`GradientCache.backward`).

The parameters' gradient is the whole batch's for every objective, and the
objective is called once per step, so the global objectives update their
per-sample state once, from the whole batch. Under ``torchrun`` each process
micro-batches its own share (the objective gathers the rest of the batch), and
the towers' gradients are reduced across processes once per step: every
micro-batch but the last runs under DDP's ``no_sync`` (FSDP2's
``set_requires_gradient_sync(False)``), so the last one's backward pass
reduces the accumulated gradients.

**Randomness is replayed.** The state of every random generator (torch's
CPU and CUDA ones, NumPy's, Python's) is recorded before each micro-batch's
first forward pass and set again before its second, so whatever ``embed_part``
draws (dropout masks, augmentations drawn inside it) is drawn the same in both;
afterwards the generators are put back where the first pass left them, so a
run with micro-batches draws the same random numbers whether or not its steps
are replayed. The trainer augments the whole batch before it is cut into
micro-batches, so a micro-batched step sees the whole batch's views.

**Batch normalization uses per-micro-batch statistics.** Both passes
normalize each micro-batch with its own statistics (as each rank does under
``torchrun``), so the two passes agree and the gradient is exact for that
model, but it is not the whole-batch model's: the gradients equal the
whole batch's only for encoders whose layers treat samples independently
(``norm=none``, LayerNorm, GroupNorm). The running statistics are updated
once per micro-batch, by the first pass; the second pass's updates (of every
buffer) are undone.

Cost: one more forward pass of the encoders per step. Memory: one
micro-batch's activations, plus the B x d embeddings and the objective's.
"""

from __future__ import annotations

from collections.abc import Callable
from contextlib import nullcontext
from itertools import pairwise

import torch
from torch import Tensor, nn

from ..validation import check_integer
from . import random_state
from .parallel import gradient_sync_deferred

EmbedPart = Callable[[slice], tuple[Tensor, Tensor]]
"""Embeds the samples ``part`` of the batch: ``(a, b)``, each (len(part), d)."""


def micro_batches(size: int, micro_batch_size: int) -> list[slice]:
    """``ceil(size / micro_batch_size)`` consecutive parts of ``size`` samples, of sizes differing by at most one.

    Even parts rather than full ones and a remainder: batch norm then never sees a micro-batch of one sample,
    and every micro-batch's statistics are about as good.
    """
    count = -(-check_integer("size", size, 1) // check_integer("micro_batch_size", micro_batch_size, 1))
    bounds = [size * k // count for k in range(count + 1)]
    return [slice(start, stop) for start, stop in pairwise(bounds)]


class GradientCache:
    """Embeds a batch in micro-batches of ``micro_batch_size`` and back-propagates into ``model`` by replay.

    ``model`` is what ``embed_part`` runs: a plain module, or one wrapped by
    DistributedDataParallel or FSDP2, whose gradient reduction then waits for
    the last micro-batch.
    """

    def __init__(self, model: nn.Module, micro_batch_size: int) -> None:
        self.model = model
        self.micro_batch_size = check_integer("micro_batch_size", micro_batch_size, 1)
        self._embed_part: EmbedPart | None = None
        self._parts: list[tuple[slice, dict]] = []
        """Each micro-batch and the random state its first forward pass started from."""
        self._buffers: list[Tensor] = []
        """The model's buffers after the first pass (batch-norm statistics), restored after the second."""

    @torch.no_grad()
    def embed(self, embed_part: EmbedPart, size: int) -> tuple[Tensor, Tensor]:
        """The embeddings ``(a, b)`` of the ``size`` samples ``embed_part`` reads, computed without a graph."""
        self._embed_part, self._parts = embed_part, []
        firsts, seconds = [], []
        for part in micro_batches(size, self.micro_batch_size):
            self._parts.append((part, random_state.capture()))
            a, b = embed_part(part)
            firsts.append(a)
            seconds.append(b)
        self._buffers = [buffer.detach().clone() for buffer in self.model.buffers()]
        return torch.cat(firsts), torch.cat(seconds)

    def backward(self, grad_a: Tensor, grad_b: Tensor) -> None:
        """Accumulate into the model's ``.grad`` the gradient whose value at the embeddings of
        :meth:`embed` is ``(grad_a, grad_b)``, one micro-batch at a time, with the same random draws."""
        if self._embed_part is None:
            raise RuntimeError("GradientCache.backward() needs the embeddings of a call to embed() first")
        after_first_pass = random_state.capture()
        try:
            for number, (part, state) in enumerate(self._parts):
                random_state.restore(state)
                last = number == len(self._parts) - 1
                with nullcontext() if last else gradient_sync_deferred(self.model):
                    pairs = [
                        (output, grad[part].to(output.dtype))
                        for output, grad in zip(self._embed_part(part), (grad_a, grad_b), strict=True)
                        if output.requires_grad  # a frozen tower's embeddings have no graph
                    ]
                    if pairs:
                        outputs, grads = zip(*pairs, strict=True)
                        torch.autograd.backward(list(outputs), list(grads))
        finally:
            random_state.restore(after_first_pass)
            with torch.no_grad():
                for buffer, saved in zip(self.model.buffers(), self._buffers, strict=True):
                    buffer.copy_(saved)
            self._embed_part, self._parts, self._buffers = None, [], []
