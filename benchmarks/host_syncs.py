"""Host synchronizations per training step of every objective: what a GPU would wait on, and where it comes from.

A *host synchronization* is an operation after which the host (Python) needs a value, or a size, that only the
device can compute: the host stops issuing kernels until the device has finished everything queued before it.
On one GPU each costs the step its queue (the launches no longer overlap the kernels) plus a round trip of a few
microseconds. There is no GPU here, so this script counts what *would* stall one: a ``TorchDispatchMode`` records
every dispatched operator whose result the host reads or whose output size depends on the data:

* ``_local_scalar_dense``: ``.item()``, ``float(t)``, ``int(t)``, ``bool(t)`` (``if t:``) of a tensor;
* ``is_nonzero``, ``equal`` (a Python bool of two tensors' values);
* data-dependent output sizes: ``nonzero`` (and ``torch.where(mask)``, ``argwhere``), ``masked_select``,
  ``_unique``/``_unique2``/``unique_dim``/``unique_consecutive``, ``bincount``, ``repeat_interleave`` without
  ``output_size``, and ``index``/``index_put`` with a boolean mask (``x[mask]``, ``x[mask] = v``);

and three Python methods that dispatch nothing on the CPU but copy to the host on a GPU: ``Tensor.tolist``,
``Tensor.numpy`` and ``Tensor.cpu`` (each counted once, whatever it dispatches inside). Not counted:
``torch._assert_async`` (the device checks and the host goes on), host-to-device copies, copies to a state kept
on the host by choice (``state_device="cpu"``), collectives (there are none in one process), and anything outside
the step (building the objective, saving, evaluating).

Each synchronization is recorded with its *site*: the innermost Python frame of the package
(``uncurated/objectives/...:line``), or of the caller when the package has none (the loop's own ``float(loss)``).

**Two steps are counted**, the second of each pair (the first settles the state's device and type):

* ``loop``: what a user's loop does per step, as the README writes it: ``objective.begin_step()``, the
  objective on two (B, d) feature leaves with ``index=``, ``loss.backward()``, and ``float(loss)`` to log it;
  column ``objective`` is the same without the ``float``, the objective's own share.
* ``trainer``: ``Trainer.step`` of ``uncurated train`` (``preset=digits``, a small MLP, one process), which adds
  the model, the finite checks of the embeddings, the loss and the gradients, and the optimizer.

Engines: ``dense`` (``tiling="never"``) and ``tiled`` (the Python tiles, ``tiling="always"``, under the CUDA tile
policy, as on a GPU: under the CPU policy NUCLR learning its popularities reads its column statistics' row offsets'
spread, once more per step, which stalls nothing on a CPU); ``triton`` (the kernels under ``TRITON_INTERPRET=1``, on
the CPU) with ``--triton``. Every objective of the registry, in its default
pairing; NUCLR where it learns its popularities (``freeze_epochs=0``), its costliest phase. B = 64, d = 16 (the
count does not depend on them: no step branches on a size it reads from the device).

Writes ``benchmarks/results/host_syncs.json``. About two minutes on 2 cores. ``host_syncs_before.json`` is the same
count of the package as it was before its reads were merged (commit f096a7a, ``PYTHONPATH`` pointing at its ``src``).

    python benchmarks/host_syncs.py --triton
    python benchmarks/host_syncs.py --objectives infonce nuclr --engines dense
"""

from __future__ import annotations

import argparse
import contextlib
import os
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

import torch

if not torch.cuda.is_available():  # before triton is imported: the kernels then run under its interpreter
    os.environ.setdefault("TRITON_INTERPRET", "1")

from timing import write_report  # noqa: E402  # the sibling module benchmarks/timing.py
from torch.utils._python_dispatch import TorchDispatchMode  # noqa: E402
from torch.utils._pytree import tree_leaves  # noqa: E402
from torch.utils.weak import WeakTensorKeyDictionary  # noqa: E402

from uncurated import objectives  # noqa: E402

RESULT = Path(__file__).parent / "results" / "host_syncs.json"
BATCH, DIM = 64, 16
TARGET = 2
"""At most this many per step: the loss value and the finite check."""
ENGINES = {
    "dense": {"tiling": "never"},
    "tiled": {"tiling": "always", "block_size": 16, "tile_policy": "cuda"},
    "triton": {"tiling": "triton"},
}

PHASE = {"nuclr": {"freeze_epochs": 0}}
"""NUCLR counted where it learns its popularities (after ``freeze_epochs``), its costliest phase."""

READS = {"_local_scalar_dense", "is_nonzero", "equal"}
"""Operators whose result is a Python value read from the device."""
SIZED_BY_DATA = {
    "nonzero",
    "argwhere",
    "masked_select",
    "_unique",
    "_unique2",
    "unique_dim",
    "unique_consecutive",
    "unique_dim_consecutive",
    "bincount",
}
"""Operators whose output's size depends on the values: the host waits for it to allocate the result."""
MASK_INDEXED = {"index", "index_put", "index_put_", "_index_put_impl", "_index_put_impl_"}
"""Indexing operators, a synchronization when an index is a boolean mask."""
HOST_COPIES = ("tolist", "numpy", "cpu")
"""``Tensor`` methods that copy a device tensor to the host (nothing is dispatched for them on the CPU)."""

COLLECTIVE_NAMESPACES = ("c10d", "_c10d_functional")
"""Where the collectives' operators live: listed apart (``SyncCounter.collectives``), not counted as reads."""

SOURCE_ROOTS = (f"{os.sep}uncurated{os.sep}",)
SKIPPED = (f"{os.sep}torch{os.sep}", str(Path(__file__).resolve()), f"{os.sep}contextlib.py")


def sync_kind(func, args, kwargs) -> str | None:
    """The name the synchronization ``func(*args, **kwargs)`` is recorded under, or ``None`` if it is none."""
    name = func.overloadpacket.__name__
    if name in READS or name in SIZED_BY_DATA:
        return name
    if name == "repeat_interleave" and kwargs.get("output_size") is None and (len(args) < 4 or args[3] is None):
        return "repeat_interleave" if isinstance(args[0], torch.Tensor) and func.__name__ != "self_int" else None
    if name in MASK_INDEXED:
        indices = args[1] if len(args) > 1 else kwargs.get("indices", ())
        if any(isinstance(i, torch.Tensor) and i.dtype in (torch.bool, torch.uint8) for i in indices or ()):
            return f"{name} (boolean mask)"
    return None


def call_site() -> str:
    """``path:line`` of the innermost frame of the package (``uncurated/...``), else of the innermost caller that is
    neither PyTorch nor this counter."""
    frame = sys._getframe(1)
    fallback = None
    while frame is not None:
        filename = frame.f_code.co_filename
        if not any(part in filename for part in SKIPPED):
            for root in SOURCE_ROOTS:
                if root in filename and f"{os.sep}site-packages{os.sep}" not in filename:
                    return f"uncurated{os.sep}{filename.split(root, 1)[1]}:{frame.f_lineno}".replace(os.sep, "/")
            if fallback is None:
                fallback = f"{Path(filename).name}:{frame.f_lineno}"
        frame = frame.f_back
    return fallback or "?"


class SyncCounter(TorchDispatchMode):
    """Records every host synchronization (see the module docstring) dispatched or called under it, with its site.

    ``events`` lists ``(kind, site)`` in order; :meth:`by_site` counts them. Tensors given as ``host`` live on the
    host in a GPU run too (the loader's batch before the trainer copies it, AdamW's step counts): a read of them,
    or of a tensor computed from them alone, stalls no GPU and is listed in ``host_reads`` instead.
    """

    def __init__(self, host: list[torch.Tensor] = ()) -> None:
        super().__init__()
        self.events: list[tuple[str, str]] = []
        self.host_reads: list[tuple[str, str]] = []
        self.collectives: list[tuple[str, str]] = []
        self._host = WeakTensorKeyDictionary()
        for tensor in host:
            self._host[tensor] = True
        self._inside_copy = 0
        self._patches: list[tuple[str, object]] = []

    def _on_host(self, values) -> bool:
        tensors = [value for value in tree_leaves(values) if isinstance(value, torch.Tensor)]
        return bool(tensors) and all(tensor in self._host for tensor in tensors)

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        kwargs = kwargs or {}
        on_host = self._on_host((args, kwargs))
        if func.namespace in COLLECTIVE_NAMESPACES:
            self.collectives.append((func.overloadpacket.__name__, call_site()))
        elif not self._inside_copy:
            kind = sync_kind(func, args, kwargs)
            if kind is not None:
                (self.host_reads if on_host else self.events).append((kind, call_site()))
        result = func(*args, **kwargs)
        if on_host:  # computed on the host from host tensors: it stays there
            for tensor in tree_leaves(result):
                if isinstance(tensor, torch.Tensor):
                    self._host[tensor] = True
        return result

    def __enter__(self):
        for name in HOST_COPIES:
            original = getattr(torch.Tensor, name)
            self._patches.append((name, original))
            setattr(torch.Tensor, name, self._counted(name, original))
        return super().__enter__()

    def __exit__(self, *exc):
        try:
            return super().__exit__(*exc)
        finally:
            for name, original in reversed(self._patches):
                setattr(torch.Tensor, name, original)
            self._patches.clear()

    def _counted(self, name: str, original):
        counter = self

        def method(tensor, *args, **kwargs):
            if counter._inside_copy:
                return original(tensor, *args, **kwargs)
            (counter.host_reads if tensor in counter._host else counter.events).append((name, call_site()))
            counter._inside_copy += 1
            try:
                result = original(tensor, *args, **kwargs)
            finally:
                counter._inside_copy -= 1
            if isinstance(result, torch.Tensor):  # a copy on the host: reading it stalls no GPU
                counter._host[result] = True
            return result

        return method

    @property
    def total(self) -> int:
        return len(self.events)

    def by_site(self) -> dict[str, int]:
        """``"kind at site"`` → how many, in order of first occurrence."""
        return dict(Counter(f"{kind} at {site}" for kind, site in self.events))


# -- a user's loop ---------------------------------------------------------------------------------------


def build(name: str, engine: str, batch: int = BATCH) -> objectives.Objective:
    params: dict = dict(ENGINES[engine])
    if objectives.OBJECTIVES[name].defaults().get("num_samples") is objectives.REQUIRED:
        params["num_samples"] = 4 * batch
    params.update(PHASE.get(name, {}))
    objective = objectives.build(name, **params)
    objective.set_epoch(1.0)  # the global objectives' schedules read it (NUCLR learns its xi from epoch 1)
    return objective


def count_loop(name: str, engine: str, batch: int = BATCH, dim: int = DIM, *, step=None) -> dict[str, SyncCounter]:
    """The synchronizations of the second of two loop steps of objective ``name`` on ``engine``: ``objective``
    (begin_step, forward, backward) and ``loss value`` (``float(loss)``). ``step``, if given, replaces the
    objective call (``step(objective, a, b, index) -> loss``), to plant a fault."""
    objective = build(name, engine, batch)
    generator = torch.Generator().manual_seed(0)
    call = step or (lambda objective, a, b, index: objective(a, b, index=index))
    counters: dict[str, SyncCounter] = {}
    for number in range(2):
        a = torch.randn(batch, dim, generator=generator).requires_grad_()
        b = torch.randn(batch, dim, generator=generator).requires_grad_()
        index = torch.arange(batch) + number * batch  # the second step visits new samples
        counters = {"objective": SyncCounter(), "loss value": SyncCounter()}
        with counters["objective"]:
            objective.begin_step()
            loss = call(objective, a, b, index)
            loss.backward()
        with counters["loss value"]:
            float(loss.detach())
    return counters


# -- the trainer ---------------------------------------------------------------------------------------------

TRAINER = [
    "preset=digits",
    "progress=false",
    "probe_train_size=0",
    "widths=[32]",
    "projection_dim=16",
    "batch_size=32",
    "train_subset=128",
    "augment=none",
]


def count_trainer(name: str, engine: str, out: Path, context=None) -> SyncCounter:
    """The synchronizations of the second of two ``Trainer.step`` calls with objective ``name`` on ``engine``;
    ``context``: the :class:`~uncurated.train.distributed.Distributed` of a process under ``torchrun`` (each then
    steps on its share of the batch, as its loader hands it)."""
    from uncurated.train import load_config
    from uncurated.train.builders import TrainingParts, build_augmentation, build_model, build_objective, build_splits
    from uncurated.train.distributed import Distributed
    from uncurated.train.random_state import seed_everything
    from uncurated.train.trainer import Trainer

    tiling = ENGINES[engine]
    extra = [f"objective.{key}={value}" for key, value in tiling.items()]
    phase = [f"objective.{key}={value}" for key, value in PHASE.get(name, {}).items()]
    config = load_config([*TRAINER, f"out={out}", "epochs=1", f"objective={name}", *extra, *phase])
    splits = build_splits(config)
    seed_everything(config.seed)
    model, objective = build_model(config, splits.train), build_objective(config, splits.train)
    parts = TrainingParts(model, objective, splits.train, build_augmentation(config), config.pipeline)
    trainer = Trainer(config, parts, context or Distributed(), out / "run")
    shares = iter(trainer._batches()) if trainer.context.enabled else None
    batches = trainer.plan.epoch(0)
    model.train()
    objective.train()
    counter = SyncCounter()
    for number in range(2):
        objective.set_epoch(1.0 + number / 100)
        batch = parts.dataset.batch(batches[number]) if shares is None else next(shares)
        steps = [state["step"] for state in trainer.optimizer.state.values() if "step" in state]
        counter = SyncCounter(host=[*steps, *(value for value in batch.values() if isinstance(value, torch.Tensor))])
        with counter:
            trainer.step(batch)
    return counter


def row(name: str, engine: str, trainer: bool, out: Path) -> dict:
    loop = count_loop(name, engine)
    result = {
        "objective": name,
        "engine": engine,
        "pairing": objectives.OBJECTIVES[name].default_pairing,
        "objective_syncs": loop["objective"].total,
        "loop_syncs": loop["objective"].total + loop["loss value"].total,
        "sites": {"objective": loop["objective"].by_site(), "loss value": loop["loss value"].by_site()},
    }
    if trainer:
        counter = count_trainer(name, engine, out)
        result["trainer_syncs"] = counter.total
        result["sites"]["trainer"] = counter.by_site()
        result["trainer_host_reads"] = dict(Counter(f"{kind} at {site}" for kind, site in counter.host_reads))
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objectives", nargs="+", default=list(objectives.OBJECTIVES))
    parser.add_argument("--engines", nargs="+", default=["dense", "tiled"], choices=list(ENGINES))
    parser.add_argument("--triton", action="store_true", help="also the kernels, under TRITON_INTERPRET=1")
    parser.add_argument("--no-trainer", action="store_true", help="only the loop, not Trainer.step")
    parser.add_argument("--output", type=Path, default=RESULT)
    parser.add_argument("--note", default="", help="what was counted, stored with the results (e.g. a commit)")
    args = parser.parse_args()
    engines = list(args.engines) + (["triton"] if args.triton and "triton" not in args.engines else [])
    torch.manual_seed(0)
    started, load = time.time(), os.getloadavg()[0]
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for name in args.objectives:
            for engine in engines:
                with contextlib.redirect_stdout(sys.stderr):
                    result = row(name, engine, not args.no_trainer, Path(folder) / f"{name}-{engine}")
                results.append(result)
                trainer = result.get("trainer_syncs", "-")
                print(
                    f"{name:>8} {engine:>6}: objective {result['objective_syncs']}, loop {result['loop_syncs']}, "
                    f"trainer {trainer}",
                    flush=True,
                )
    settings = {
        "batch": BATCH,
        "dim": DIM,
        "target": TARGET,
        "step": {
            "objective": "begin_step(), objective(a, b, index=index), loss.backward()",
            "loop": "the objective's step and float(loss), the loss value a loop logs",
            "trainer": "Trainer.step of uncurated train, preset=digits, one process",
        },
        "counted": {
            "reads": sorted(READS),
            "sized_by_data": sorted(SIZED_BY_DATA | {"repeat_interleave"}),
            "mask_indexed": sorted(MASK_INDEXED),
            "host_copies": list(HOST_COPIES),
        },
        "definition": "see the docstring of benchmarks/host_syncs.py",
        "note": args.note,
        "load_average_start": load,
        "load_average_end": os.getloadavg()[0],
        "seconds": round(time.time() - started),
    }
    write_report(args.output, "host_syncs", settings, results)


if __name__ == "__main__":
    main()
