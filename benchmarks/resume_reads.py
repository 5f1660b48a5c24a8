"""Bytes of a checkpoint each process hashes (SHA-256) when a run resumes under ``torchrun``, and when it saves.

A resumed run verifies the files of its checkpoint against their checksums before it loads them. This script
trains a short run of ``W`` processes (gloo on the CPU, ``preset=digits``) with a checkpoint, then resumes it in
``W`` processes that count, each, the bytes every call of ``uncurated.train.file_hashes.describe_file`` hashes
(the function that reads a file whose checksum is needed; ``checkpoint._describe`` before it): while the run
resumes (``Resuming.resume``) and while it writes its next checkpoint (``Trainer.save``). Each count is given as a
multiple of the checkpoint's bytes (all files of its manifest). Both ``parallel=ddp`` (whole weights) and
``parallel=fsdp`` (DCP shards).

Writes ``benchmarks/results/resume_reads.json``; ``--output`` and ``--note`` for a count of another commit
(``resume_reads_before.json``: ``PYTHONPATH`` at that commit's ``src``). About a minute on 2 cores.

    python benchmarks/resume_reads.py --processes 2
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

RESULT = Path(__file__).parent / "results" / "resume_reads.json"
RUN = ["preset=digits", "progress=false", "probe_train_size=0", "augment=none", "batch_size=64", "train_subset=512"]
"""A short run of two epochs of 8 steps; the first is killed once its checkpoint of step 8 is published."""


def count_here(arguments: list[str], output: Path) -> None:
    """In each ``torchrun`` process: resume the run, counting what ``_describe`` hashes, by phase."""
    from uncurated.train import checkpoint, load_config, resumption, trainer
    from uncurated.train.run import train

    try:
        from uncurated.train import file_hashes as hashes

        name = "describe_file"
    except ImportError:  # a commit before file_hashes
        hashes, name = checkpoint, "_describe"

    counts = {"resume": 0, "save": 0, "other": 0}
    phase = ["other"]
    describe = getattr(hashes, name)

    def counted(path: Path):
        counts[phase[0]] += path.stat().st_size
        return describe(path)

    def during(name: str, method):
        def wrapped(*args, **kwargs):
            phase[0] = name
            try:
                return method(*args, **kwargs)
            finally:
                phase[0] = "other"

        return wrapped

    setattr(hashes, name, counted)
    resumption.Resuming.resume = during("resume", resumption.Resuming.resume)
    trainer.Trainer.save = during("save", trainer.Trainer.save)
    rank = int(os.environ.get("RANK", 0))
    try:
        train(load_config(arguments))
    finally:
        (output / f"rank{rank}.json").write_text(json.dumps(counts))


def checkpoint_bytes(run_dir: Path) -> int:
    """The bytes of the files of the run's oldest kept checkpoint (the one resumed from)."""
    folder = sorted((run_dir / "checkpoints").glob("step-*"))[0]
    manifest = json.loads((folder / "manifest.json").read_text())
    return sum(entry["bytes"] for entry in manifest["files"].values())


def measure(parallel: str, processes: int, folder: Path) -> list[dict]:
    torchrun = torchrun_command(processes)
    common = [*RUN, f"out={folder}", f"name={parallel}", f"parallel={parallel}", "keep_checkpoints=5", "epochs=2"]
    killed = {**os.environ, "UNCURATED_CHECKPOINT_FAULT": "8:pointer"}
    subprocess.run([*torchrun, "-m", "uncurated", "train", *common], env=killed, stdout=sys.stderr, stderr=sys.stderr)
    total = checkpoint_bytes(folder / parallel)
    counts = folder / f"{parallel}-counts"
    counts.mkdir()
    worker = [__file__, "--worker", str(counts), "--", *common, "resume=true"]
    subprocess.run([*torchrun, *worker], check=True, stdout=sys.stderr)
    rows = []
    for rank in range(processes):
        hashed = json.loads((counts / f"rank{rank}.json").read_text())
        row = {"parallel": parallel, "rank": rank, "checkpoint_bytes": total}
        row.update({f"{phase}_bytes_hashed": value for phase, value in hashed.items()})
        row.update({f"{phase}_times_checkpoint": round(value / total, 3) for phase, value in hashed.items()})
        rows.append(row)
    return rows


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--parallel", nargs="+", default=["ddp", "fsdp"])
    parser.add_argument("--output", type=Path, default=RESULT)
    parser.add_argument("--note", default="")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    parser.add_argument("arguments", nargs="*", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        count_here(args.arguments, args.worker)
        return
    started, load = time.time(), os.getloadavg()[0]
    results = []
    with tempfile.TemporaryDirectory() as folder:
        for parallel in args.parallel:
            results += measure(parallel, args.processes, Path(folder))
    for row in results:
        print(
            f"{row['parallel']} rank {row['rank']}: resume {row['resume_times_checkpoint']}x, "
            f"save {row['save_times_checkpoint']}x of {row['checkpoint_bytes']} bytes",
            flush=True,
        )
    settings = {
        "processes": args.processes,
        "run": RUN,
        "counted": "bytes each process hashes (file_hashes.describe_file), by phase: resume, save, other",
        "note": args.note,
        "load_average_start": load,
        "load_average_end": os.getloadavg()[0],
        "seconds": round(time.time() - started),
    }
    write_report(args.output, "resume_reads", settings, results)


if __name__ == "__main__":
    main()
