"""Step time of a ``parallel=fsdp`` run of two processes that checkpoints every 50 steps, waiting for each save or
writing it in the background (``checkpoint_async=true``: DCP's ``async_save`` for the shards), against a run that
saves nothing as it trains.

``torchrun`` with gloo on the CPU, one thread per process, ``preset=digits`` with a wider MLP
(``widths=[WIDTH, WIDTH]``, so that a checkpoint is tens of MB and its write shows), 150 steps, no checkpoint at
each epoch's end. Each process times ``Trainer.fit`` (the run's last checkpoint, which every arm writes and waits
for, included) and the seconds its training thread spent in ``Trainer._save_once`` (every save: the blocking part
of a background one, the whole of one waited for); the run's time is the slower process's. The arms alternate
within each repeat, and each repeat's ratios are taken against its own arm without saves (the machine is shared:
compare within a repeat). Writes ``benchmarks/results/background_save_fsdp.json``.

    python benchmarks/background_save_fsdp.py --repeats 3
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from timing import write_report  # noqa: E402  # the sibling module benchmarks/timing.py
from torchrun import torchrun_command  # noqa: E402  # the sibling module benchmarks/torchrun.py

RESULT = Path(__file__).parent / "results" / "background_save_fsdp.json"
PROCESSES, EVERY, WIDTH = 2, 50, 1024
STEPS_PER_EPOCH = 22  # digits' 1,438 training images in batches of 64
EPOCHS = "6.818181"  # 150 steps
ARMS = {
    "no saves while training": ["checkpoint_every=0"],
    "a save every 50 steps, waited for": [f"checkpoint_every={EVERY}"],
    "a save every 50 steps, in the background": [f"checkpoint_every={EVERY}", "checkpoint_async=true"],
}


def time_here(arguments: list[str], output: Path) -> None:
    """In each ``torchrun`` process: train, timing ``Trainer.fit`` and the saves in it."""
    from uncurated.train import load_config, trainer
    from uncurated.train.distributed import end_training_process
    from uncurated.train.run import train

    timed = {"fit_seconds": 0.0, "save_seconds": 0.0, "saves": 0, "steps": 0}
    fit, save_once = trainer.Trainer.fit, trainer.Trainer._save_once

    def timed_fit(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return fit(self, *args, **kwargs)
        finally:
            timed["fit_seconds"] += time.perf_counter() - started
            timed["steps"] = self.position.step

    def timed_save(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return save_once(self, *args, **kwargs)
        finally:
            timed["save_seconds"] += time.perf_counter() - started
            timed["saves"] += 1

    trainer.Trainer.fit, trainer.Trainer._save_once = timed_fit, timed_save
    rank = int(os.environ.get("RANK", 0))
    train(load_config(arguments))
    (output / f"rank{rank}.json").write_text(json.dumps(timed))
    end_training_process(None)  # as the command does: gloo's teardown at exit may abort the process


def run_arm(arguments: list[str], folder: Path) -> dict:
    """One run of ``arguments`` under torchrun; the slower process's times, and the checkpoint's bytes."""
    torchrun = torchrun_command(PROCESSES)
    times = folder / "times"
    times.mkdir(parents=True)
    environment = {**os.environ, "OMP_NUM_THREADS": "1"}
    worker = [__file__, "--worker", str(times), "--", *arguments]
    subprocess.run([*torchrun, *worker], check=True, env=environment, stdout=sys.stderr)
    ranks = [json.loads((times / f"rank{rank}.json").read_text()) for rank in range(PROCESSES)]
    latest = sorted((folder / "run" / "checkpoints").glob("step-*"))[-1]
    manifest = json.loads((latest / "manifest.json").read_text())
    return {
        "fit_seconds": max(rank["fit_seconds"] for rank in ranks),
        "save_seconds": max(rank["save_seconds"] for rank in ranks),
        "saves": ranks[0]["saves"],
        "steps": ranks[0]["steps"],
        "checkpoint_bytes": sum(entry["bytes"] for entry in manifest["files"].values()),
    }


def uptime() -> str:
    return subprocess.run(["uptime"], capture_output=True, text=True).stdout.strip()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=3)
    parser.add_argument("--output", type=Path, default=RESULT)
    parser.add_argument("--note", default="")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("arguments", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        time_here(args.arguments, args.worker)
        return
    common = [
        *("preset=digits", "progress=false", "probe_train_size=0", "augment=none", "batch_size=64", "norm=none"),
        *(f"widths=[{WIDTH},{WIDTH}]", "checkpoint_each_epoch=false", "log_every=50", "keep_checkpoints=2"),
        *("parallel=fsdp", "dist_timeout=300", f"epochs={EPOCHS}"),
    ]
    started, load_before = time.time(), uptime()
    repeats = []
    with tempfile.TemporaryDirectory() as folder:
        for repeat in range(args.repeats):
            arms = {}
            for index, (arm, extra) in enumerate(ARMS.items()):
                out = Path(folder) / f"{repeat}-{index}"
                arms[arm] = run_arm([*common, *extra, f"out={out}", "name=run"], out)
                print(f"repeat {repeat}, {arm}: {arms[arm]}", flush=True)
            base = arms["no saves while training"]["fit_seconds"]
            for row in arms.values():
                row["step_ms"] = round(1000 * row["fit_seconds"] / row["steps"], 2)
                row["slower_than_no_saves"] = round(row["fit_seconds"] / base - 1, 4)
            repeats.append(arms)
    results = []
    for arm in ARMS:
        rows = [repeat[arm] for repeat in repeats]
        ratios = [row["slower_than_no_saves"] for row in rows]
        results.append(
            {
                "arm": arm,
                "step_ms": [row["step_ms"] for row in rows],
                "fit_seconds": [round(row["fit_seconds"], 3) for row in rows],
                "save_seconds_in_training_thread": [round(row["save_seconds"], 3) for row in rows],
                "saves": rows[0]["saves"],
                "slower_than_no_saves_per_repeat": ratios,
                "slower_than_no_saves_spread": [min(ratios), max(ratios)],
            }
        )
        print(f"{arm}: {results[-1]}", flush=True)
    settings = {
        "processes": PROCESSES,
        "steps": repeats[0]["no saves while training"]["steps"],
        "save_every": EVERY,
        "width": WIDTH,
        "checkpoint_bytes": repeats[0]["a save every 50 steps, waited for"]["checkpoint_bytes"],
        "threads_per_process": 1,
        "note": args.note,
        "uptime_start": load_before,
        "uptime_end": uptime(),
        "seconds": round(time.time() - started),
    }
    write_report(args.output, "background_save_fsdp", settings, results)


if __name__ == "__main__":
    main()
