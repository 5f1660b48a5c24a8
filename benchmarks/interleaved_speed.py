"""The interleaved timing table in one run: CLIP tiled, dense, open_clip, the matmul floor, bf16 and the global
objectives.

For each batch size B (4,096 and 16,384; 65,536 without dense and open_clip)
and each thread setting (one torch thread, and torch's default; 65,536 with
one thread only), one
fresh subprocess builds every compared step (d = 256, unit vectors, cross
pairing, forward + backward, as in ``tiled_speed.py``):

* ``floor``: the three B x B x d matrix products alone;
* ``tiled`` / ``dense``: this project's CLIP loss (``infonce``) with
  ``tiling="always"`` / ``"never"``;
* ``tiled_bf16``: tiled CLIP on bfloat16 features (the precision contract:
  products in bf16, statistics in float32);
* ``open_clip``: ``open_clip.loss.ClipLoss`` when it can be found, else
  recorded as skipped with the reason;
* ``sogclr``, ``isogclr``, ``nuclr``: the global objectives, tiled, past
  NUCLR's frozen epochs (every state update runs; NUCLR's in the backward
  pass), at CLIP's temperature 0.07. iSogCLR's per-sample temperatures are
  held there (``temperature_lr=0``: the update is computed, the temperatures
  do not move), because on these random features its update drives every
  temperature to ``temperature_min`` = 0.01 within a few steps, and below
  t = 0.026 no loss takes the engine's fast path (CLIP neither);
* ``tiled_t001`` and ``isogclr_t001``: tiled CLIP at t = 0.01 and iSogCLR
  with its temperatures learned freely (at 0.01 after the first steps), the
  comparison at a low temperature.

**Interleaved rounds.** The machine these numbers come from has 2 cores,
often shared with other jobs, so a configuration timed alone for a minute
can see a different machine than the next. Each child instead runs
every step once per round, the order rotated from round to round, for
``ROUNDS[B]`` rounds (after one untimed warm-up round below B = 16,384); a step's time is the
median over rounds and each ratio (tiled / floor, objective / tiled CLIP,
bf16 / float32, ...) is the median of the per-round ratios, so the load a
round saw cancels in its ratios. Absolute times still move with the load:
the load average is recorded at the start and end of every child and of the
run. Peak memory is not measured here: see ``tiled_speed.py`` (each loss in
its own process) and ``micro_batch_memory.py``.

The default run took 23 minutes on 2 cores with nothing else running (load 0.8 to 1.9); expect more under load.

    python benchmarks/interleaved_speed.py                 # the full table
    python benchmarks/interleaved_speed.py --quick         # B in {256, 1024}: a smoke test (a minute)
    python benchmarks/interleaved_speed.py --batch 16384 --threads 2 --steps tiled isogclr nuclr --rounds 7
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import torch
from tiled_speed import features, floor_step, load_open_clip_loss, loss_step  # sibling modules of benchmarks/
from timing import write_report

STEPS = (
    "floor",
    "tiled",
    "tiled_bf16",
    "dense",
    "open_clip",
    "sogclr",
    "isogclr",
    "nuclr",
    "tiled_t001",
    "isogclr_t001",
)
BIG_STEPS = ("floor", "tiled", "tiled_bf16", "sogclr", "isogclr", "nuclr", "tiled_t001", "isogclr_t001")
"""At the largest B: the floor, tiled CLIP (float32 and bf16) and the global objectives, tiled (a dense 65,536^2
matrix does not fit, nor does open_clip's)."""
ROUNDS = {256: 5, 1024: 5, 4096: 5, 16384: 3, 65536: 1}
WARMUP_BELOW = 16384
"""An untimed warm-up round below this B; above it one step takes seconds to minutes, and lazy set-up is noise."""
RATIOS = {
    "tiled / floor": ("tiled", "floor"),
    "tiled / dense": ("tiled", "dense"),
    "tiled / open_clip": ("tiled", "open_clip"),
    "tiled bf16 / tiled float32": ("tiled_bf16", "tiled"),
    "sogclr / tiled CLIP": ("sogclr", "tiled"),
    "isogclr / tiled CLIP": ("isogclr", "tiled"),
    "nuclr / tiled CLIP": ("nuclr", "tiled"),
    "tiled CLIP t 0.01 / t 0.07": ("tiled_t001", "tiled"),
    "isogclr learned t / tiled CLIP t 0.01": ("isogclr_t001", "tiled_t001"),
}


def build_step(name: str, a, b):
    """One forward + backward of ``name`` (see the module docstring), or raises LookupError with why not."""
    if name == "floor":
        return floor_step(a, b)
    if name == "tiled_bf16":
        return loss_step("tiled", a.bfloat16(), b.bfloat16(), {"pairing": "cross"})
    if name == "open_clip":
        if load_open_clip_loss()[0] is None:
            raise LookupError(load_open_clip_loss()[1])
        return loss_step("open_clip", a, b, {})
    if name in ("tiled", "dense"):
        return loss_step(name, a, b, {"pairing": "cross"})
    if name == "tiled_t001":
        return loss_step("tiled", a, b, {"pairing": "cross", "options": {"temperature": 0.01}})
    if name == "isogclr":
        options = {"temperature": 0.07, "temperature_lr": 0.0}  # held at CLIP's temperature (module docstring)
        return loss_step("tiled", a, b, {"objective": name, "pairing": "cross", "options": options})
    objective = {"isogclr_t001": "isogclr"}.get(name, name)
    return loss_step("tiled", a, b, {"objective": objective, "pairing": "cross"})  # calls begin_step() per step


def run_child(config: dict) -> dict:
    if config["threads"]:
        torch.set_num_threads(config["threads"])
    load_start = os.getloadavg()
    a, b = features(config["batch"], config["dim"])
    steps, skipped = {}, {}
    for name in config["steps"]:
        try:
            steps[name] = build_step(name, a, b)
        except LookupError as error:
            skipped[name] = str(error)
    times = {name: [] for name in steps}
    names = list(steps)
    first = 0 if config["batch"] < WARMUP_BELOW else 1  # round 0: the untimed warm-up
    for round_index in range(first, config["rounds"] + 1):
        order = names[round_index % len(names) :] + names[: round_index % len(names)]
        for name in order:
            start = time.perf_counter()
            try:
                steps[name]()
            except (MemoryError, RuntimeError) as error:
                skipped[name] = f"failed: {str(error).splitlines()[0][:150]}"
                names.remove(name)
                continue
            if round_index:
                times[name].append(time.perf_counter() - start)
    ratios = {}
    for label, (top, bottom) in RATIOS.items():
        if times.get(top) and times.get(bottom) and top in names and bottom in names:
            ratios[label] = statistics.median(t / u for t, u in zip(times[top], times[bottom], strict=True))
    return {
        "threads_used": torch.get_num_threads(),
        "load_average_start": load_start,
        "load_average_end": os.getloadavg(),
        "median_seconds": {
            name: statistics.median(values) for name, values in times.items() if values and name in names
        },
        "round_seconds": {name: values for name, values in times.items() if name in names},
        "ratios": ratios,
        "skipped": skipped,
    }


def measure(config: dict) -> dict:
    env = dict(os.environ)
    env.pop("OMP_NUM_THREADS", None)  # the default setting means torch's own choice
    if config["threads"]:
        env["OMP_NUM_THREADS"] = str(config["threads"])
    done = subprocess.run(
        [sys.executable, __file__, "--child", json.dumps(config)], capture_output=True, text=True, env=env
    )
    if done.returncode != 0:
        return {**config, "status": "failed", "reason": (done.stderr.strip().splitlines() or ["?"])[-1][:300]}
    return {**config, "status": "ok", **json.loads(done.stdout.strip().splitlines()[-1])}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--quick", action="store_true", help="B in {256, 1024}, the largest without dense: a smoke test"
    )
    parser.add_argument("--dim", type=int, default=256)
    parser.add_argument("--batch", type=int, help="one B only (with --threads, --steps and --rounds): a single row")
    parser.add_argument("--threads", type=int, default=0, help="with --batch: torch threads (0: torch's default)")
    parser.add_argument("--steps", nargs="+", choices=STEPS, default=list(STEPS), help="with --batch: the steps")
    parser.add_argument("--rounds", type=int, help="with --batch: the timed rounds (default: ROUNDS of B)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument("--child", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(run_child(json.loads(args.child))))
        return
    sizes, big = ([256], 1024) if args.quick else ([4096, 16384], 65536)
    out = args.out or Path(__file__).parent / "results" / (
        "interleaved_speed_quick.json" if args.quick else "interleaved_speed.json"
    )
    load_start, started = os.getloadavg(), time.perf_counter()
    rows = []
    # The largest B with one thread only: its single round takes about 9 minutes.
    plan = [(batch, threads, STEPS) for batch in sizes for threads in (1, 0)] + [(big, 1, BIG_STEPS)]
    if args.batch:
        plan = [(args.batch, args.threads, args.steps)]
    for batch, threads, steps in plan:
        rounds = args.rounds or ROUNDS.get(batch, 3)
        config = {"batch": batch, "threads": threads, "dim": args.dim, "rounds": rounds, "steps": list(steps)}
        row = measure(config)
        rows.append(row)
        print_row(row)
    settings = {
        "dim": args.dim,
        "dtype": "float32 (tiled_bf16: bfloat16)",
        "pairing": "cross",
        "cpu_count": os.cpu_count(),
        "load_average_at_start": load_start,
        "load_average_at_end": os.getloadavg(),
        "wall_seconds": time.perf_counter() - started,
        "method": "interleaved rounds, medians of times and of per-round ratios (see the module docstring)",
    }
    write_report(out, "interleaved_speed", settings, {"rows": rows})


def print_row(row: dict) -> None:
    threads = row["threads"] or "default"
    head = f"B = {row['batch']}, threads {threads} ({row.get('threads_used', '?')}), {row['rounds']} rounds"
    if row["status"] != "ok":
        print(f"{head}: {row['status']}: {row['reason']}", flush=True)
        return
    load = row["load_average_start"][0], row["load_average_end"][0]
    print(f"{head}, load {load[0]:.1f} -> {load[1]:.1f}", flush=True)
    for name, seconds in row["median_seconds"].items():
        print(f"  {name:>11}: {seconds:8.3f} s", flush=True)
    for label, value in row["ratios"].items():
        print(f"  {label}: {value:.2f}", flush=True)
    for name, reason in row["skipped"].items():
        print(f"  {name}: skipped ({reason})", flush=True)


if __name__ == "__main__":
    main()
