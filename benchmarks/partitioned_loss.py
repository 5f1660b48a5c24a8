"""Scaling out by partition: each process's loss work, per-sample state and communication, for W = 1, 2, 4.

Three measurements, written to ``benchmarks/results/partitioned_loss.json`` and drawn in ``partitioned_loss.png``:

* **work**: every objective (its default pairing, the engine's automatic tiling) on a global batch of
  ``B = 16,384`` pairs, ``d = 256``, forward and backward, in ``W`` processes (gloo, one thread each), each
  calling the objective on its ``B / W`` pairs. Counted per process: the matrix-product flops
  (``torch.utils.flop_counter``) and the dispatched operators and the elements they wrote (a dispatch mode;
  collectives left out). Timed, for ``W`` = 1 and 2 only (two cores): the median wall time and CPU time of a
  process's loss step (the slower process's), the two sides interleaved objective by objective; the CPU time
  is what the process computed, the wall time adds what it waited for the cores and the other process.
* **state**: the bytes of per-sample state one process holds, measured for ``n = 10^7`` at ``W`` = 1, 2, 4
  (each process's tensors allocated) and computed for ``n = 2 x 10^9`` (LAION-2B).
* **communication**: the bytes each process sends per step, by kind, counted by the objectives' collectives
  (:func:`uncurated.process.shard.count_traffic`, ring algorithms), and the towers' gradients that DDP
  all-reduces, computed for two tower sizes.

    python benchmarks/partitioned_loss.py            # everything (about 30 minutes on 2 idle cores)
    python benchmarks/partitioned_loss.py --skip-timing
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import tempfile
import time
from pathlib import Path

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from torch.utils._python_dispatch import TorchDispatchMode
from torch.utils._pytree import tree_flatten
from torch.utils.flop_counter import FlopCounterMode

from uncurated import objectives
from uncurated.process.shard import count_traffic
from uncurated.state import SampleState

RESULTS = Path(__file__).resolve().parent / "results"
BATCH, DIM, SAMPLES = 16_384, 256, 10 * 16_384
STATE_SAMPLES, LAION = 10**7, 2 * 10**9
WORLDS = (1, 2, 4)
#: Towers whose gradients DDP all-reduces, by parameter count: the fashion-mnist preset's ResNet (widths 16-32-64,
#: projection head to 128; counted with build_model) and hf:resnet + hf:distilbert, the cc3m presets' towers
#: (67.2 M, benchmarks/results/backbone_step_time.json).
TOWERS = {"fashion-mnist preset's ResNet": 176_048, "hf:resnet + hf:distilbert (cc3m presets)": 67_200_000}


class OperatorCount(TorchDispatchMode):
    """Counts the aten operators dispatched and the elements they write (collectives left out)."""

    def __init__(self) -> None:
        super().__init__()
        self.operators, self.elements = 0, 0

    def __torch_dispatch__(self, func, types, args=(), kwargs=None):
        out = func(*args, **(kwargs or {}))
        if func.namespace not in ("c10d", "_c10d_functional"):
            self.operators += 1
            self.elements += sum(x.numel() for x in tree_flatten(out)[0] if isinstance(x, torch.Tensor))
        return out


def build(name: str) -> torch.nn.Module:
    objective = objectives.build(name, num_samples=SAMPLES) if _stateful(name) else objectives.build(name)
    objective.set_epoch(10.0)  # past NUCLR's frozen epochs: every update runs
    return objective


def _stateful(name: str) -> bool:
    return objectives.OBJECTIVES[name].defaults().get("num_samples") is not None


def local_inputs(rank: int, world: int, batch: int) -> tuple[torch.Tensor, torch.Tensor, torch.Tensor]:
    """This process's share of one seeded global batch."""
    generator = torch.Generator().manual_seed(0)
    a, b = torch.randn(2, batch, DIM, generator=generator)
    index = torch.randperm(SAMPLES, generator=generator)[:batch]
    rows = slice(rank * batch // world, (rank + 1) * batch // world)
    return a[rows].clone(), b[rows].clone(), index[rows].clone()


def loss_step(objective, a, b, index) -> None:
    objective.begin_step()
    x, y = a.clone().requires_grad_(True), b.clone().requires_grad_(True)
    objective(x, y, index=index).backward()


def _worker(rank: int, world: int, init_file: str, mode: str, names: list[str], batch: int, repeats: int, results):
    torch.set_num_threads(1)
    if world > 1:
        dist.init_process_group("gloo", init_method=f"file://{init_file}", rank=rank, world_size=world)
    try:
        a, b, index = local_inputs(rank, world, batch)
        outcome = {}
        for name in names:
            objective = build(name)
            if mode == "count":
                flops, operators = FlopCounterMode(display=False), OperatorCount()
                with count_traffic() as traffic, flops, operators:
                    loss_step(objective, a, b, index)
                outcome[name] = {
                    "matmul_flops": flops.get_total_flops(),
                    "operators": operators.operators,
                    "elements_written": operators.elements,
                    "bytes_sent": dict(traffic),
                }
            else:
                loss_step(objective, a, b, index)  # warm-up
                times, cpu = [], []
                for _ in range(repeats):
                    if world > 1:
                        dist.barrier()
                    start, start_cpu = time.perf_counter(), time.process_time()
                    loss_step(objective, a, b, index)
                    times.append(time.perf_counter() - start)
                    cpu.append(time.process_time() - start_cpu)
                outcome[name] = {
                    "seconds": statistics.median(times),
                    "cpu_seconds": statistics.median(cpu),
                    "load": os.getloadavg(),
                }
        results[rank] = outcome
    finally:
        if world > 1:
            dist.destroy_process_group()


def run(world: int, mode: str, names: list[str], batch: int, repeats: int = 3) -> dict[int, dict]:
    with tempfile.TemporaryDirectory() as folder, mp.Manager() as manager:
        results = manager.dict()
        args = (world, str(Path(folder) / "init"), mode, names, batch, repeats, results)
        mp.spawn(_worker, args=args, nprocs=world, join=True)
        return dict(results)


def work(names: list[str], batch: int) -> dict:
    """Counted work per process (rank 0's; the processes' counts differ by a few operators at most)."""
    counted = {}
    for world in WORLDS:
        print(f"counting the work of {world} process(es) ...", flush=True)
        per_rank = run(world, "count", names, batch)
        counted[world] = {name: per_rank[0][name] for name in names}
        counted[world]["largest_rank_operators"] = {
            name: max(per_rank[rank][name]["operators"] for rank in per_rank) for name in names
        }
    return counted


def timing(names: list[str], batch: int, repeats: int) -> dict:
    """The loss step's time per process, one thread each, W = 1 and W = 2 interleaved objective by objective."""
    timed = {1: {}, 2: {}}
    for name in names:
        for world in (1, 2):
            print(f"timing {name} with {world} process(es) ...", flush=True)
            per_rank = run(world, "time", [name], batch, repeats)
            timed[world][name] = {
                "seconds": max(per_rank[rank][name]["seconds"] for rank in per_rank),
                "cpu_seconds": max(per_rank[rank][name]["cpu_seconds"] for rank in per_rank),
                "load": per_rank[0][name]["load"],
            }
    return timed


def state_bytes() -> dict:
    """Per-sample state per process: measured at n = 10^7 (every process's tensors allocated), computed at 2e9."""
    sizes = {}
    for name in [name for name in objectives.OBJECTIVES if _stateful(name)]:
        fields = build(name).state_fields()
        measured = {}
        for world in WORLDS:
            stores = [
                SampleState(
                    {"a": STATE_SAMPLES, "b": STATE_SAMPLES},
                    fields,
                    dtype=torch.float32,
                    place=lambda r=r, w=world: (r, w),
                )
                for r in range(world)
            ]
            measured[world] = max(store.memory_bytes() for store in stores)
            del stores
        per_row = measured[1] / STATE_SAMPLES
        sizes[name] = {
            "fields_per_side": len(fields),
            "measured_bytes_at_1e7": measured,
            "computed_bytes_at_2e9": {world: per_row * LAION / world for world in WORLDS},
        }
    return sizes


def gradient_bytes() -> dict:
    """DDP's ring all-reduce of float32 gradients sends 2 (W - 1) / W times their bytes from each process."""
    return {
        tower: {world: 4 * parameters * 2 * (world - 1) / world for world in WORLDS}
        for tower, parameters in TOWERS.items()
    }


def plot(report: dict, path: Path) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    names = report["objectives"]
    figure, axes = plt.subplots(1, 2, figsize=(12, 4.2))
    width = 0.38
    positions = range(len(names))
    work_ = report["work"]
    for offset, world in ((-width / 2, "2"), (width / 2, "4")):
        ratios = [work_[world][name]["matmul_flops"] / work_["1"][name]["matmul_flops"] for name in names]
        axes[0].bar([p + offset for p in positions], ratios, width, label=f"W = {world}")
    axes[0].axhline(0.3, color="black", linestyle=":", linewidth=1, label="0.3x (aim at W = 4)")
    axes[0].set_xticks(list(positions), names, rotation=45, ha="right")
    axes[0].set_ylabel("matrix-product flops per process / W = 1")
    axes[0].set_ylim(0, 0.65)
    axes[0].set_title(f"loss work per process, B = {report['batch']:,}, d = {DIM}")
    axes[0].legend(ncol=3, loc="upper center")
    state = report["state"]
    for k, name in enumerate(state):
        values = [state[name]["computed_bytes_at_2e9"][str(w)] / 1e9 for w in WORLDS]
        axes[1].bar([w + (k - 1) * 0.25 for w in range(len(WORLDS))], values, 0.25, label=name)
    axes[1].set_xticks(range(len(WORLDS)), [f"W = {w}" for w in WORLDS])
    axes[1].set_ylabel("GB per process")
    axes[1].set_title("per-sample state per process at n = 2 x 10^9 pairs")
    axes[1].legend()
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    print(f"wrote {path}")


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--objectives", nargs="+", default=list(objectives.OBJECTIVES))
    parser.add_argument("--batch", type=int, default=BATCH, help="the global batch B (16,384 for the report)")
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--skip-timing", action="store_true")
    parser.add_argument("--skip-counting", action="store_true", help="time only (the counts do not depend on load)")
    parser.add_argument("--timed", nargs="+", help="the objectives to time (default: all of --objectives)")
    parser.add_argument("--out", type=Path, default=RESULTS / "partitioned_loss.json")
    args = parser.parse_args()
    started, load = time.time(), os.getloadavg()
    report = {
        "benchmark": "partitioned_loss",
        "torch": torch.__version__,
        "batch": args.batch,
        "dim": DIM,
        "objectives": args.objectives,
        "load_at_start": load,
        "state": state_bytes(),
        "gradients_bytes_sent": gradient_bytes(),
    }
    if not args.skip_counting:
        report["work"] = work(args.objectives, args.batch)
    if not args.skip_timing:
        report["time"] = timing(args.timed or args.objectives, args.batch, args.repeats)
    report["load_at_end"] = os.getloadavg()
    report["minutes"] = (time.time() - started) / 60
    report = json.loads(json.dumps(report))  # integer keys become strings, as they are read back
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {args.out}")
    if "work" in report:
        plot(report, args.out.with_suffix(".png"))


if __name__ == "__main__":
    main()
