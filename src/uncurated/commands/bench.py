"""``uncurated bench``: every objective of the library on the embedded data, the papers' claims in one report."""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

SUITE_CHOICES = ("two-view", "image-text", "theory")

NAME = "bench"
HELP = "measure the papers' claims side by side: every objective, three suites, one report"
DESCRIPTION = (
    "Train the library's objectives on Fashion-MNIST or Fashion-MNIST in clutter (two views) and\n"
    "FashionCaptions (image-text, with structured caption noise and long tails), run the theory toys and\n"
    "Nozawa & Sato 2021's bound on the trained InfoNCE model, and write report.md and a self-contained\n"
    "report.html with a results table per suite, the plots, the configuration and versions, and a claims\n"
    "table. Each claim is declared in the claims registry (the paper's effect, a smallest effect of interest,\n"
    "the departures, the checks that its mechanism engaged); with its checks passed, its suite's learning gate\n"
    "passed and 3 or more paired seeds it is held, reversed, absent (an equivalence test puts it within the\n"
    "smallest effect of interest) or inconclusive, Holm-adjusted across the report; otherwise no verdict, with\n"
    "the reason. A preset short of a claim's declared seeds says so before it runs (claims refuses to start).\n"
    "Progress and the ETA go to stderr. Run it again to resume: finished runs are reused, a run cut mid-way\n"
    "continues from its checkpoint.\n\n"
    "  uncurated bench --preset quick             # what `make demo` runs\n"
    "  uncurated bench --preset two-view          # the thesis's two-view claims, Fashion-MNIST in clutter\n"
    "  uncurated bench --preset claims            # every claim in its designed regime with its seeds\n"
    "  uncurated bench --preset full --out runs/bench-full\n"
    "  uncurated bench --preset tiny --suites theory\n\n"
    "presets:\n"
)
FORMATTER = argparse.RawDescriptionHelpFormatter


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from ..bench.presets import PRESETS

    # A parser made without this command's description (argparse's default is None) starts from it.
    parser.description = (parser.description or DESCRIPTION) + "\n".join(
        f"  {name:<8} {preset.description} Estimated: {preset.estimate}." for name, preset in PRESETS.items()
    )
    parser.add_argument("--preset", choices=sorted(PRESETS), default="quick", help="the budget (default: %(default)s)")
    parser.add_argument(
        "--out",
        type=Path,
        default=None,
        metavar="DIR",
        help="the bench folder (default: runs/bench-PRESET-YYYYMMDD; an existing one is resumed)",
    )
    parser.add_argument(
        "--data-dir",
        type=Path,
        default=None,
        metavar="DIR",
        help="the Fashion-MNIST IDX folder (default: /usr/share/datasets/fashion-mnist)",
    )
    parser.add_argument(
        "--suites",
        nargs="+",
        choices=SUITE_CHOICES,
        default=None,
        metavar="SUITE",
        help=f"the suites to run, of {', '.join(SUITE_CHOICES)} (default: the preset's: "
        "two-view alone for gpu and two-view, all for the others; the bound needs two-view)",
    )
    parser.add_argument(
        "--report-only",
        action="store_true",
        help="train nothing: write the report from the runs finished so far (e.g. while a bench is running)",
    )
    parser.add_argument("--device", default="auto", help="training device: auto, cpu, cuda, ... (default: %(default)s)")


def run(args: argparse.Namespace) -> int:
    from ..bench import PRESETS, default_out, run_bench, write_report
    from ..bench.report import print_claims
    from ..train.config import ConfigError

    parser: argparse.ArgumentParser = args.parser
    preset = PRESETS[args.preset]
    out = args.out or default_out(preset.name)
    suites = preset.suites if args.suites is None else tuple(suite.replace("-", "_") for suite in args.suites)
    try:
        results = run_bench(
            preset, out, data_dir=args.data_dir, suites=suites, device=args.device, report_only=args.report_only
        )
    except (ConfigError, FileNotFoundError) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    summary = write_report(results)
    print(f"uncurated bench, preset {preset.name}: {len(results.runs)} runs in {out}")
    print("claims:")
    print_claims(summary)
    print(f"wrote {out / 'report.md'} and {out / 'report.html'}")
    sys.stdout.flush()
    return 0
