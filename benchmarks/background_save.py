"""Step time of a run that checkpoints every 50 steps, waiting for each save or publishing it in the background
(``checkpoint_async=true``), against a run that saves nothing as it trains.

One process, ``preset=digits`` with a wider MLP (``widths=[WIDTH, WIDTH]``, so that a checkpoint is tens of MB and
its write shows), 150 steps, no checkpoint at each epoch's end. Each arm's time is ``Trainer.fit``'s (the run's
last checkpoint, which every arm writes and waits for, included), the arms alternating, the fastest of
``--repeats``; the step time is that over the steps. Writes ``benchmarks/results/background_save.json``.

    python benchmarks/background_save.py --repeats 2
"""

from __future__ import annotations

import argparse
import os
import tempfile
import time
from pathlib import Path

from timing import write_report  # noqa: E402  # the sibling module benchmarks/timing.py

RESULT = Path(__file__).parent / "results" / "background_save.json"
STEPS, EVERY, WIDTH = 150, 50, 1024
ARMS = {
    "no saves while training": ["checkpoint_every=0"],
    "a save every 50 steps, waited for": [f"checkpoint_every={EVERY}"],
    "a save every 50 steps, in the background": [f"checkpoint_every={EVERY}", "checkpoint_async=true"],
}


def fit_seconds(arguments: list[str]) -> tuple[float, int]:
    """The seconds ``Trainer.fit`` took for the run of ``arguments``, and the checkpoint's bytes."""
    from uncurated.train import load_config, trainer
    from uncurated.train.run import train

    seconds = []
    fit = trainer.Trainer.fit

    def timed(self, *args, **kwargs):
        started = time.perf_counter()
        try:
            return fit(self, *args, **kwargs)
        finally:
            seconds.append(time.perf_counter() - started)

    trainer.Trainer.fit = timed
    try:
        config = load_config(arguments)
        train(config)
    finally:
        trainer.Trainer.fit = fit
    folder = Path(config.out) / config.name / "checkpoints"
    latest = sorted(folder.glob("step-*"))[-1]
    return seconds[0], sum(path.stat().st_size for path in latest.iterdir())


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--repeats", type=int, default=2)
    parser.add_argument("--output", type=Path, default=RESULT)
    parser.add_argument("--note", default="")
    args = parser.parse_args()
    common = [
        *("preset=digits", "progress=false", "probe_train_size=0", "augment=none", "batch_size=64"),
        *(f"widths=[{WIDTH},{WIDTH}]", "checkpoint_each_epoch=false", "log_every=50", "keep_checkpoints=2"),
        f"epochs={STEPS * 64 / 1438:.6f}",
    ]
    started, load = time.time(), os.getloadavg()[0]
    times: dict[str, list[float]] = {arm: [] for arm in ARMS}
    size = 0
    with tempfile.TemporaryDirectory() as folder:
        for repeat in range(args.repeats):
            for arm, extra in ARMS.items():
                name = f"{list(ARMS).index(arm)}-{repeat}"
                seconds, size = fit_seconds([*common, *extra, f"out={folder}", f"name={name}"])
                times[arm].append(seconds)
    base = min(times["no saves while training"])
    results = []
    for arm, values in times.items():
        best = min(values)
        row = {"arm": arm, "fit_seconds": [round(v, 3) for v in values], "step_ms": round(1000 * best / STEPS, 2)}
        row["slower_than_no_saves"] = round(best / base - 1, 4)
        results.append(row)
        print(f"{arm}: {row['step_ms']} ms/step ({100 * row['slower_than_no_saves']:+.1f} %)", flush=True)
    settings = {
        "steps": STEPS,
        "save_every": EVERY,
        "width": WIDTH,
        "checkpoint_bytes": size,
        "threads": os.environ.get("OMP_NUM_THREADS", "default"),
        "note": args.note,
        "load_average_start": load,
        "load_average_end": os.getloadavg()[0],
        "seconds": round(time.time() - started),
    }
    write_report(args.output, "background_save", settings, results)


if __name__ == "__main__":
    main()
