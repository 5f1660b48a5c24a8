"""Host synchronizations per ``Trainer.step`` under ``torchrun``: the count of ``benchmarks/host_syncs.py`` in each
of ``W`` processes (gloo on the CPU), the collectives listed apart.

Run plainly, it starts ``torchrun --nproc_per_node=W`` on itself; each process counts the second of two steps of
every objective asked for (``preset=digits``, as ``host_syncs.py``'s trainer column) and rank 0 writes
``benchmarks/results/host_syncs_ranks.json``: per objective and rank, the reads (what a GPU would wait on, by
site), the reads of host tensors (none wait), and the collectives (by operator and site), which are the
processes' exchanges, not reads. About a minute on 2 cores.

    python benchmarks/host_syncs_ranks.py --objectives clip nuclr --processes 2
"""

from __future__ import annotations

import argparse
import json
import os
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path

from timing import write_report  # noqa: E402  # the sibling module benchmarks/timing.py
from torchrun import torchrun_command  # noqa: E402  # the sibling module benchmarks/torchrun.py

RESULT = Path(__file__).parent / "results" / "host_syncs_ranks.json"
DEFAULT_OBJECTIVES = ["clip", "nuclr"]


def count_here(names: list[str], engines: list[str], output: Path) -> None:
    """In each ``torchrun`` process: count every objective's step; every rank writes its rows as JSON."""
    import host_syncs

    from uncurated.train.distributed import setup, teardown

    context = setup("cpu")
    rows = []
    with tempfile.TemporaryDirectory() as folder:
        for name in names:
            for engine in engines:
                counter = host_syncs.count_trainer(name, engine, Path(folder) / f"{name}-{engine}", context)
                rows.append(
                    {
                        "objective": name,
                        "engine": engine,
                        "rank": context.rank,
                        "trainer_syncs": counter.total,
                        "sites": counter.by_site(),
                        "host_reads": dict(Counter(f"{kind} at {site}" for kind, site in counter.host_reads)),
                        "collectives": dict(Counter(f"{kind} at {site}" for kind, site in counter.collectives)),
                    }
                )
    (output / f"rank{context.rank}.json").write_text(json.dumps(rows))
    teardown(context)


def launch(names: list[str], engines: list[str], processes: int, folder: Path) -> list[dict]:
    """``torchrun`` of this script in ``processes`` processes; every rank's rows, by objective then rank."""
    command = [
        *torchrun_command(processes),
        *(__file__, "--worker", str(folder), "--objectives", *names, "--engines", *engines),
    ]
    subprocess.run(command, check=True, stdout=sys.stderr)
    rows = [row for rank in range(processes) for row in json.loads((folder / f"rank{rank}.json").read_text())]
    return sorted(rows, key=lambda row: (row["objective"], row["engine"], row["rank"]))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--objectives", nargs="+", default=DEFAULT_OBJECTIVES)
    parser.add_argument("--engines", nargs="+", default=["dense", "tiled"])
    parser.add_argument("--processes", type=int, default=2)
    parser.add_argument("--output", type=Path, default=RESULT)
    parser.add_argument("--note", default="", help="what was counted, stored with the results (e.g. a commit)")
    parser.add_argument("--worker", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.worker is not None:
        count_here(args.objectives, args.engines, args.worker)
        return
    started, load = time.time(), os.getloadavg()[0]
    with tempfile.TemporaryDirectory() as folder:
        results = launch(args.objectives, args.engines, args.processes, Path(folder))
    for row in results:
        print(f"{row['objective']:>8} {row['engine']:>6} rank {row['rank']}: {row['trainer_syncs']}", flush=True)
    settings = {
        "processes": args.processes,
        "backend": "gloo",
        "target": 2,
        "step": "Trainer.step of uncurated train, preset=digits, each process its share of the batch",
        "definition": "see the docstrings of benchmarks/host_syncs.py and benchmarks/host_syncs_ranks.py",
        "note": args.note,
        "load_average_start": load,
        "load_average_end": os.getloadavg()[0],
        "seconds": round(time.time() - started),
    }
    write_report(args.output, "host_syncs_ranks", settings, results)


if __name__ == "__main__":
    main()
