"""Tiled against dense contrastive losses: forward + backward time and peak memory against the batch size.

One run measures, for B in {1024, 4096, 16384, 65536} and d = 256 (float32,
unit vectors, ``--threads`` torch threads, 1 by default):

* ``floor``: the matrix products alone, the score matrix ``A B^T`` and the two
  feature-gradient products ``dS B``, ``dS^T A`` (done in 4096-row strips, so
  that it fits at every B; same flops as the dense products);
* ``tiled``: this project's CLIP loss (``infonce``, cross pairing) with
  ``tiling="always"`` and the automatic block size;
* ``dense``: the same with ``tiling="never"``;
* ``plain``: two ``F.cross_entropy`` over ``logits`` and ``logits.T``;
* ``open_clip``: ``open_clip.loss.ClipLoss`` when ``open-clip-torch`` can be
  found (its package imports torchvision, which has no CPU build here, so its
  ``loss.py`` is loaded on its own; put the package on ``PYTHONPATH``, e.g.
  ``pip install --no-deps --target DIR open-clip-torch``), else skipped with the reason;

and every objective of the package, tiled and dense, at B = 4096 (each with
its default pairing), and tiled at B = 65536 (``--big-objectives``: by default
one objective per path of the engine, see ``BIG_OBJECTIVES``) with the cross pairing for all
(the two-view objectives' default 2B x 2B matrix would be four times CLIP's;
``--big-pairing default`` keeps it). Each configuration runs in a fresh subprocess whose address space
is limited (``--memory-limit-gib``, default 12) so that a dense run that
cannot fit fails at once with an allocation error, recorded as "does not fit",
instead of pushing the machine into swap or the OOM killer. Peak memory is the
child's ``ru_maxrss`` after the step minus its value before it (inputs and
libraries excluded). Times are medians of repeats (fewer at large B).

One thread is the default because on a machine shared with other work, two
OpenMP threads stall at every operator's barrier whenever one is descheduled,
which penalizes the tiled path's many tile-sized operators far more than the
dense path's few large ones; ``--threads 0`` uses torch's default. The load
average at the start and the end is recorded with the results.

Writes ``benchmarks/results/tiled_speed.json`` (``--quick``:
``tiled_speed_quick.json``) and a PNG of time and memory against B beside it,
and prints the tables and the performance targets with their ratios.

    python benchmarks/tiled_speed.py            # the full run (25 minutes on 2 idle cores, more under load)
    python benchmarks/tiled_speed.py --quick    # B in {256, 1024}, objectives at 512: a smoke test
"""

from __future__ import annotations

import argparse
import importlib.util
import json
import resource
import subprocess
import sys
import time
from pathlib import Path

import torch
import torch.nn.functional as F
from timing import median_seconds, write_report  # the sibling module benchmarks/timing.py

METHODS = ("floor", "tiled", "dense", "plain", "open_clip")
BIG_OBJECTIVES = ("infonce", "siglip", "sogclr", "isogclr", "nuclr")
"""Run at the largest batch by default: one objective per path of the engine (shared exponentials,
negative sums, per-anchor scales with the mean score, the global objectives' state updates with
NUCLR's offsets and column pass). cyclip, clip_reg, dcl and rince ask for infonce's statistics,
hcl for two weights of them; ``--big-objectives all`` runs every objective (about twice as long)."""
STRIP = 4096
LOGIT_SCALE = 1.0 / 0.07


# -- the child: one configuration in a fresh process ---------------------------------------------


def features(batch: int, dim: int) -> tuple[torch.Tensor, torch.Tensor]:
    generator = torch.Generator().manual_seed(0)
    a = F.normalize(torch.randn(batch, dim, generator=generator), dim=1)
    b = F.normalize(torch.randn(batch, dim, generator=generator), dim=1)
    return a, b


def load_open_clip_loss():
    """``open_clip``'s ``ClipLoss``, or the reason it is unavailable.

    The package's ``__init__`` imports torchvision; ``loss.py`` needs only torch,
    so it is loaded from the package's folder without running the ``__init__``.
    """
    spec = importlib.util.find_spec("open_clip")
    if spec is None or not spec.submodule_search_locations:
        return (
            None,
            "open-clip-torch is not installed (pip install --no-deps --target DIR open-clip-torch; PYTHONPATH=DIR)",
        )
    try:
        import open_clip

        return open_clip.ClipLoss, None
    except ImportError:  # torchvision missing: load loss.py alone
        path = Path(next(iter(spec.submodule_search_locations))) / "loss.py"
        module_spec = importlib.util.spec_from_file_location("open_clip_loss", path)
        module = importlib.util.module_from_spec(module_spec)
        module_spec.loader.exec_module(module)
        return module.ClipLoss, None


def floor_step(a: torch.Tensor, b: torch.Tensor):
    """The three B x B x d products, in row strips: ``S = A B^T``, ``dA = S B``, ``dB = S^T A``."""

    def step():
        grad_b = torch.zeros_like(b)
        for start in range(0, a.shape[0], STRIP):
            rows = a[start : start + STRIP]
            scores = rows @ b.T
            _ = scores @ b
            grad_b += scores.T @ rows

    return step


def loss_step(method: str, a0: torch.Tensor, b0: torch.Tensor, config: dict):
    """A callable running one forward and backward of ``method`` (or of an objective)."""
    from uncurated import objectives

    batch = a0.shape[0]
    labels = torch.arange(batch)
    scale = torch.tensor(LOGIT_SCALE)
    if method == "plain":

        def loss(a, b):
            logits = scale * a @ b.T
            return (F.cross_entropy(logits, labels) + F.cross_entropy(logits.T, labels)) / 2
    elif method == "open_clip":
        clip_loss, reason = load_open_clip_loss()
        if clip_loss is None:
            raise LookupError(reason)
        module = clip_loss()

        def loss(a, b):
            return module(a, b, scale)
    else:
        name = config.get("objective", "infonce")
        tiling = "always" if method == "tiled" else "never"
        spec = {s.name: s for s in objectives.available()}[name]
        params = {"normalize": False, "tiling": tiling, **config.get("options", {})}
        if config.get("pairing"):
            params["pairing"] = config["pairing"]
        if spec.stateful:
            params["num_samples"] = 4 * batch
        objective = objectives.build(name, **params)
        if spec.stateful:
            objective.set_epoch(10)  # past NUCLR's frozen epochs: every update runs
            index = torch.arange(batch)

            def loss(a, b):
                objective.begin_step()  # each timed call is a new step (the state guards refuse a second update)
                return objective(a, b, index=index)
        else:

            def loss(a, b):
                return objective(a, b)

    def step():
        a, b = a0.clone().requires_grad_(True), b0.clone().requires_grad_(True)
        loss(a, b).backward()

    return step


def max_rss_bytes() -> int:
    return resource.getrusage(resource.RUSAGE_SELF).ru_maxrss * 1024


def is_allocation_failure(error: BaseException) -> bool:
    return isinstance(error, MemoryError) or (
        isinstance(error, RuntimeError) and ("allocate" in str(error) or "out of memory" in str(error).lower())
    )


def run_child(config: dict) -> dict:
    limit = int(config["memory_limit"])
    resource.setrlimit(resource.RLIMIT_AS, (limit, limit))
    if config.get("threads"):
        torch.set_num_threads(config["threads"])
    big = config.get("big", "objective" in config and config["batch"] >= 65536)
    if big and config["objective"] not in config.get("big_objectives", BIG_OBJECTIVES):
        return {
            "status": "skipped",
            "reason": "not in --big-objectives (its statistics are another's; see BIG_OBJECTIVES)",
        }
    a, b = features(config["batch"], config["dim"])
    try:
        step = floor_step(a, b) if config["method"] == "floor" else loss_step(config["method"], a, b, config)
    except LookupError as error:
        return {"status": "skipped", "reason": str(error)}
    before = max_rss_bytes()
    try:
        seconds = median_seconds(step, config["repeats"], config["warmup"])
    except (MemoryError, RuntimeError) as error:
        if not is_allocation_failure(error):
            raise
        return {"status": "does not fit", "reason": str(error).splitlines()[0][:200]}
    return {
        "status": "ok",
        "seconds": seconds,
        "peak_bytes": max_rss_bytes() - before,
        "threads": torch.get_num_threads(),
    }


# -- the parent: the grid, the tables, the targets ------------------------------------------------


def measure(config: dict, timeout: float) -> dict:
    """Run one configuration in a fresh subprocess; its JSON result, or why it has none."""
    started = time.perf_counter()
    try:
        done = subprocess.run(
            [sys.executable, __file__, "--child", json.dumps(config)],
            capture_output=True,
            text=True,
            timeout=timeout,
        )
    except subprocess.TimeoutExpired:
        return {**config, "status": "timed out", "reason": f"over {timeout:.0f} s"}
    if done.returncode != 0:
        reason = (done.stderr.strip().splitlines() or [f"exit status {done.returncode}"])[-1]
        status = "does not fit" if done.returncode < 0 or "MemoryError" in reason else "failed"
        return {**config, "status": status, "reason": reason[:300]}
    result = json.loads(done.stdout.strip().splitlines()[-1])
    return {**config, **result, "wall_seconds": time.perf_counter() - started}


def repeats_for(batch: int) -> tuple[int, int]:
    """(repeats, warmup): fewer at large B, where one step takes minutes."""
    if batch <= 4096:
        return 5, 2
    if batch <= 16384:
        return 2, 1
    return 1, 0


def describe(row: dict) -> str:
    if row["status"] != "ok":
        return f"{row['status']}"
    return f"{row['seconds']:9.3f} s {row['peak_bytes'] / 2**20:10.1f} MiB"


def lookup(rows: list[dict], **match) -> dict | None:
    for row in rows:
        if all(row.get(key) == value for key, value in match.items()):
            return row
    return None


def ratio(rows, field, numerator: dict, denominator: dict) -> float | None:
    top, bottom = lookup(rows, **numerator), lookup(rows, **denominator)
    if not top or not bottom or top["status"] != "ok" or bottom["status"] != "ok" or not bottom[field]:
        return None
    return top[field] / bottom[field]


def targets(scaling: list[dict], per_objective: list[dict], sizes, objective_batch, big_batch) -> dict:
    """The performance targets as ratios within this run, each with whether it is met."""
    found = {}

    def record(name, value, bound):
        found[name] = {"value": value, "bound": bound, "met": None if value is None else value <= bound}

    if 16384 in sizes:
        record(
            "peak memory tiled / dense at B=16384",
            ratio(scaling, "peak_bytes", {"method": "tiled", "batch": 16384}, {"method": "dense", "batch": 16384}),
            1 / 8,
        )
    if 4096 in sizes:
        record(
            "time tiled / dense at B=4096",
            ratio(scaling, "seconds", {"method": "tiled", "batch": 4096}, {"method": "dense", "batch": 4096}),
            1.2,
        )
    for batch in sizes:
        if batch >= 4096:
            record(
                f"time tiled / floor at B={batch}",
                ratio(scaling, "seconds", {"method": "tiled", "batch": batch}, {"method": "floor", "batch": batch}),
                1.5,
            )
    for batch, mode in ((objective_batch, "tiled"), (objective_batch, "dense"), (big_batch, "tiled")):
        for name in ("sogclr", "nuclr", "isogclr"):
            record(
                f"time {name} / infonce ({mode}) at B={batch}",
                ratio(
                    per_objective,
                    "seconds",
                    {"objective": name, "batch": batch, "method": mode},
                    {"objective": "infonce", "batch": batch, "method": mode},
                ),
                1.2,
            )
    big = [
        row
        for row in per_objective
        if row["batch"] == big_batch and row["method"] == "tiled" and row["status"] != "skipped"
    ]
    if big:
        fitted = all(row["status"] == "ok" for row in big)
        dense_big = lookup(scaling, method="dense", batch=big_batch)
        found[f"every objective run tiled completes at B={big_batch}"] = {
            "met": fitted,
            "run": [r["objective"] for r in big],
            "failed": [r["objective"] for r in big if r["status"] != "ok"],
            "largest_peak_bytes": max((r.get("peak_bytes", 0) for r in big), default=0),
        }
        if dense_big is not None:
            found[f"dense CLIP at B={big_batch}"] = {"status": dense_big["status"], "met": dense_big["status"] != "ok"}
    return found


def print_targets(found: dict) -> None:
    print("\ntargets (ratios within this run):")
    for name, entry in found.items():
        value = entry.get("value")
        shown = "n/a" if value is None and "value" in entry else (f"{value:.3f}" if value is not None else "")
        bound = f" (<= {entry['bound']:.3g})" if "bound" in entry else ""
        print(f"  {name}: {shown}{bound} {'met' if entry['met'] else 'NOT met' if entry['met'] is False else ''}")


def plot(scaling: list[dict], path: Path) -> str | None:
    try:
        import matplotlib

        matplotlib.use("Agg")
        import matplotlib.pyplot as plt
    except ImportError:
        return None
    figure, (left, right) = plt.subplots(1, 2, figsize=(11, 4.2))
    for color, method in enumerate(METHODS):
        rows = [r for r in scaling if r["method"] == method and r["status"] == "ok"]
        if not rows:
            continue
        batches = [r["batch"] for r in rows]
        style = {"marker": "o", "label": method, "color": f"C{color}", "linestyle": ":" if method == "floor" else "-"}
        left.plot(batches, [r["seconds"] for r in rows], **style)
        right.plot(batches, [max(r["peak_bytes"], 1) / 2**20 for r in rows], **style)
    for axis, label in ((left, "forward + backward (s)"), (right, "peak memory above inputs (MiB)")):
        axis.set_xscale("log", base=2)
        axis.set_yscale("log")
        axis.set_xlabel("batch size B (d = 256, float32)")
        axis.set_ylabel(label)
        axis.grid(True, which="both", alpha=0.3)
        axis.legend()
    figure.suptitle("CLIP loss: tiled vs dense (missing points: does not fit)")
    figure.tight_layout()
    figure.savefig(path, dpi=120)
    return str(path)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="small batches only (a smoke test)")
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--memory-limit-gib", type=float, default=12.0, help="address-space limit of each child")
    parser.add_argument(
        "--threads",
        type=int,
        default=1,
        help="torch threads of every child (0: torch's default); 1 keeps timings stable on a shared machine",
    )
    parser.add_argument("--timeout", type=float, default=3600.0, help="seconds per configuration")
    parser.add_argument("--skip-objectives", action="store_true", help="only the CLIP scaling table")
    parser.add_argument(
        "--big-objectives",
        default=",".join(BIG_OBJECTIVES),
        help="comma-separated objectives to run at the largest batch, or 'all'",
    )
    parser.add_argument(
        "--big-pairing",
        choices=("cross", "default"),
        default="cross",
        help="pairing of every objective at the largest batch",
    )
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--replot", type=Path, help="only recompute the targets and redraw the PNG of a saved JSON report"
    )
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(json.loads(args.child))))
        return
    if args.replot:
        report = json.loads(args.replot.read_text())
        results = report["results"]
        batches = sorted({row["batch"] for row in results["scaling"]})
        objective_batches = sorted({row["batch"] for row in results["objectives"]}) or [None, None]
        results["targets"] = targets(
            results["scaling"], results["objectives"], batches, objective_batches[0], objective_batches[-1]
        )
        args.replot.write_text(json.dumps(report, indent=2) + "\n")
        print_targets(results["targets"])
        print(plot(results["scaling"], args.replot.with_suffix(".png")))
        return
    load_at_start = __import__("os").getloadavg()
    sizes = [256, 1024] if args.quick else [1024, 4096, 16384, 65536]
    objective_batch, big_batch = (512, 1024) if args.quick else (4096, 65536)
    out = args.out or Path("benchmarks/results") / ("tiled_speed_quick.json" if args.quick else "tiled_speed.json")
    limit = int(args.memory_limit_gib * 2**30)
    base = {"dim": args.dim, "memory_limit": limit, "threads": args.threads}

    scaling, unfit = [], set()
    print(f"{'B':>6} {'method':>10} {'median':>11} {'peak':>14}", flush=True)
    for batch in sizes:
        repeats, warmup = repeats_for(batch)
        for method in METHODS:
            config = {**base, "method": method, "batch": batch, "repeats": repeats, "warmup": warmup}
            if method in unfit:
                row = {**config, "status": "does not fit", "reason": "a smaller batch did not fit"}
            else:
                row = measure(config, args.timeout)
            if row["status"] == "does not fit":
                unfit.add(method)
            scaling.append(row)
            print(f"{batch:>6} {method:>10} {describe(row)}", flush=True)

    per_objective = []
    if not args.skip_objectives:
        from uncurated import objectives

        names = list(objectives.OBJECTIVES)
        print(f"\n{'B':>6} {'objective':>9} {'method':>6} {'median':>11} {'peak':>14}", flush=True)
        big_pairing = None if args.big_pairing == "default" else args.big_pairing
        big_names = names if args.big_objectives == "all" else args.big_objectives.split(",")
        for batch, modes, pairing in (
            (objective_batch, ("tiled", "dense"), None),
            (big_batch, ("tiled",), big_pairing),
        ):
            repeats, warmup = repeats_for(batch)
            for mode in modes:
                for name in names:
                    config = {
                        **base,
                        "method": mode,
                        "objective": name,
                        "batch": batch,
                        "repeats": repeats,
                        "big": batch == big_batch,
                        "big_objectives": big_names,
                        "warmup": warmup,
                        "pairing": pairing or objectives.OBJECTIVES[name].default_pairing
                        if hasattr(objectives.OBJECTIVES[name], "default_pairing")
                        else pairing or "cross",
                    }
                    row = measure(config, args.timeout)
                    per_objective.append(row)
                    print(f"{batch:>6} {name:>9} {mode:>6} {describe(row)}", flush=True)

    found = targets(scaling, per_objective, sizes, objective_batch, big_batch)
    print_targets(found)
    picture = plot(scaling, out.with_suffix(".png"))
    settings = {
        "load_average_at_end": __import__("os").getloadavg(),
        "load_average_at_start": load_at_start,
        "dim": args.dim,
        "dtype": "float32",
        "memory_limit_bytes": limit,
        "quick": args.quick,
        "cpu_count": __import__("os").cpu_count(),
        "plot": picture,
    }
    write_report(out, "tiled_speed", settings, {"scaling": scaling, "objectives": per_objective, "targets": found})


if __name__ == "__main__":
    main()
