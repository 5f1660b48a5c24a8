"""``uncurated debias``: zero-shot group metrics of a trained run before and after calibrated projection."""

from __future__ import annotations

import argparse
import json
from pathlib import Path

from .arguments import positive_float, usage_errors

NAME = "debias"
HELP = "zero-shot group metrics of a trained run before and after calibrated projection"
DESCRIPTION = (
    "Load an image-text run trained on dataset=fashion-spurious, project the spurious (background) "
    "directions out of its zero-shot class vectors (P0) and calibrate with attribute-swapped prompt "
    "pairs (Lemma 7.1), and report worst-group and average accuracy on the balanced test split."
)


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("run_dir", type=Path, nargs="?", metavar="RUN", help="the run folder (runs/NAME)")
    parser.add_argument(
        "--professions",
        action="store_true",
        help="instead of a run: calibrate the frozen all-MiniLM-L6-v2 on gendered profession prompts "
        "(needs pip install 'uncurated[minilm]')",
    )
    parser.add_argument(
        "--prompts", default="fashion-captions", help="prompt set name or YAML file (default: %(default)s)"
    )
    parser.add_argument(
        "--lam", type=positive_float, default=1000.0, help="calibration strength lambda, > 0 (default: %(default)s)"
    )
    parser.add_argument("--out", type=Path, default=None, metavar="DIR", help="output folder (default: RUN)")


def run(args: argparse.Namespace) -> int:
    from ..debias.benchmark import format_table, write_outputs

    parser: argparse.ArgumentParser = args.parser
    if args.professions:
        return _run_professions(args)
    if args.run_dir is None:
        parser.error("give a RUN folder, or --professions")
    with usage_errors(parser):
        report = debias_run(args.run_dir, prompts=args.prompts, lam=args.lam)
    print(format_table(report))
    json_path, png_path = write_outputs(report, args.out or args.run_dir)
    print(f"wrote {json_path} and {png_path}")
    return 0


def debias_run(run_dir: Path, *, prompts: str, lam: float) -> dict:
    """:func:`~uncurated.debias.benchmark.debias_model` on the run in ``run_dir``, rebuilt by ``load_run``."""
    from ..debias.benchmark import debias_model
    from ..train.config import ConfigError
    from ..train.restore import load_run, read_run_config

    config = read_run_config(run_dir)  # checked before the model is rebuilt
    if config.dataset != "fashion-spurious" or config.pipeline != "image_text":
        raise ConfigError(f"{run_dir} is not an image-text run on dataset=fashion-spurious")
    restored = load_run(run_dir)
    return {"run": str(run_dir), **debias_model(restored.model, restored.splits.test, prompts=prompts, lam=lam)}


def _run_professions(args: argparse.Namespace) -> int:
    from ..debias.professions import profession_study
    from ..models import MiniLMTextEncoder

    report = profession_study(MiniLMTextEncoder())
    print(f"{'split':>6} {'method':>7} {'pair distance':>14} {'profession accuracy':>20}")
    for split, rows in report["splits"].items():
        for method, row in rows.items():
            print(f"{split:>6} {method:>7} {row['pair_distance']:>14.4f} {100 * row['profession_accuracy']:>19.1f}%")
    out = args.out or Path("runs/debias-professions")
    out.mkdir(parents=True, exist_ok=True)
    (out / "professions.json").write_text(json.dumps(report, indent=2) + "\n")
    print(f"wrote {out / 'professions.json'}")
    return 0
