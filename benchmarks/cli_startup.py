"""How long `uncurated --help` and `uncurated COMMAND --help` take, in fresh processes.

Each command line runs in a new Python process (what a user waits for), `--repeats` times, interleaved with
the others and with the same command lines run on another source tree (`--baseline-src`, e.g. the main
branch's `src`, before the command modules imported the library lazily), so that a change of load falls on
both alike. Reported per command line: the median and the minimum wall time, and whether torch was loaded
(the child process prints it at exit). `python -c pass` and `import torch` are timed alongside, for scale.
The load average is recorded before and after: timings under load are upper bounds.

    python benchmarks/cli_startup.py                                   # writes benchmarks/results/cli_startup.json
    python benchmarks/cli_startup.py --baseline-src /path/to/main/src  # and the same command lines there
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import time
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]

#: The command lines timed: the top-level help and every command's and toy's.
COMMAND_LINES = (
    ["--help"],
    ["objectives", "--help"],
    ["demo", "--help"],
    ["train", "--help"],
    ["debias", "--help"],
    ["eval", "--help"],
    ["bench", "--help"],
    ["bound", "--help"],
    ["toy", "--help"],
    ["toy", "nuclr", "--help"],
    ["toy", "wpse", "--help"],
    ["toy", "dcl", "--help"],
    ["toy", "clip-margin", "--help"],
)

#: Runs `uncurated ARGS` from the source tree on sys.path[0] and says, on stderr, whether torch was loaded.
CHILD = (
    "import atexit, sys\n"
    "state = lambda: 'torch-' + ('loaded' if 'torch' in sys.modules else 'not-loaded')\n"
    "atexit.register(lambda: print(state(), file=sys.stderr))\n"
    "from uncurated.cli import main\n"
    "try:\n"
    "    main(sys.argv[1:])\n"
    "except SystemExit:\n"
    "    pass\n"
)


def timed(command: list[str], env: dict, cli: bool) -> tuple[float, bool]:
    """The wall time of ``command`` and whether it loaded torch (for a command line of ``uncurated``)."""
    start = time.perf_counter()
    done = subprocess.run(command, capture_output=True, text=True, env=env, check=False)
    seconds = time.perf_counter() - start
    if (cli and "torch-" not in done.stderr) or (not cli and done.returncode != 0):
        raise RuntimeError(f"{command} failed: {done.stderr[-2000:]}")
    return seconds, "torch-loaded" in done.stderr


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--repeats", type=int, default=7, help="runs of each command line (default: 7)")
    parser.add_argument("--baseline-src", type=Path, default=None, help="another source tree to time alongside")
    parser.add_argument("--out", type=Path, default=ROOT / "benchmarks" / "results" / "cli_startup.json")
    args = parser.parse_args()

    trees = {"this tree": ROOT / "src"}
    if args.baseline_src is not None:
        trees["baseline"] = args.baseline_src.resolve()
    jobs = [
        ("python -c pass", [sys.executable, "-c", "pass"], None),
        ("import torch", [sys.executable, "-c", "import torch"], None),
    ]
    for tree, src in trees.items():
        for line in COMMAND_LINES:
            jobs.append((f"{tree}: uncurated {' '.join(line)}", [sys.executable, "-c", CHILD, *line], src))
    times: dict[str, list[float]] = {name: [] for name, _, _ in jobs}
    torch_loaded: dict[str, bool] = {}
    load_before = os.getloadavg()
    for repeat in range(args.repeats):
        order = jobs[repeat % len(jobs) :] + jobs[: repeat % len(jobs)]  # rotated each round
        for name, command, src in order:
            env = dict(os.environ)
            if src is not None:
                env["PYTHONPATH"] = str(src)
            seconds, loaded = timed(command, env, cli=src is not None)
            times[name].append(seconds)
            torch_loaded[name] = loaded
    load_after = os.getloadavg()
    results = {
        name: {
            "median_s": round(statistics.median(values), 4),
            "min_s": round(min(values), 4),
            "torch_loaded": torch_loaded.get(name) if name.startswith(tuple(trees)) else None,
        }
        for name, values in times.items()
    }
    report = {
        "benchmark": "cli_startup",
        "python": platform.python_version(),
        "machine": platform.processor() or platform.machine(),
        "cpus": os.cpu_count(),
        "repeats": args.repeats,
        "trees": {name: str(path) for name, path in trees.items()},
        "load_average_before": [round(x, 2) for x in load_before],
        "load_average_after": [round(x, 2) for x in load_after],
        "results": results,
    }
    args.out.parent.mkdir(parents=True, exist_ok=True)
    args.out.write_text(json.dumps(report, indent=2) + "\n")
    width = max(map(len, results))
    for name, row in results.items():
        print(f"{name:<{width}}  median {row['median_s']:.3f} s  min {row['min_s']:.3f} s  torch {row['torch_loaded']}")
    print(f"load average {load_before[0]:.2f} -> {load_after[0]:.2f}; wrote {args.out}")


if __name__ == "__main__":
    main()
