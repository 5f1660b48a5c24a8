"""The ``uncurated`` command: list the objectives, compare them on Fashion-MNIST, run the toys.

Run ``uncurated --help`` for the subcommands and ``uncurated COMMAND --help``
for the options of each.
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from collections.abc import Sequence
from pathlib import Path

from . import __version__, objectives
from .data import DEFAULT_ROOT, load_fashion_mnist
from .demo import format_parameters, objective_table, print_objective_table
from .commands import bound, toys as more_toys
from .commands import bench as bench_command
from .commands import evaluate as evaluate_command
from .commands.arguments import integer_at_least as _integer_at_least
from .commands.arguments import positive_float as _positive_float
from .commands.outputs import write_toy_outputs
from .theory import nuclr_toy, wpse_toy


def main(argv: Sequence[str] | None = None) -> int:
    """Run the command line ``argv`` (default: ``sys.argv[1:]``); return the exit status.

    Usage errors and a missing dataset exit with status 2 through ``SystemExit``.
    """
    parser = build_parser()
    args = parser.parse_args(argv)
    return args.run(args)


def build_parser() -> argparse.ArgumentParser:
    """The parser of ``uncurated`` and its subcommands; each subcommand sets ``run``."""
    parser = argparse.ArgumentParser(
        prog="uncurated",
        description="Contrastive representation learning from uncurated data.",
        epilog="Run `uncurated COMMAND --help` for the options of a command.",
    )
    parser.add_argument("--version", action="version", version=f"%(prog)s {__version__}")
    commands = parser.add_subparsers(title="commands", dest="command", required=True)

    listing = commands.add_parser(
        "objectives",
        help="list every objective with its summary and parameters",
        description="List every contrastive objective: its name, summary and parameters with their defaults.",
    )
    listing.set_defaults(run=_run_objectives)

    demo = commands.add_parser(
        "demo",
        help="evaluate every objective on a Fashion-MNIST test batch",
        description=(
            "Evaluate every objective, under both pairings, on two augmented views of a Fashion-MNIST "
            "test batch embedded by a fixed random projection. Nothing is trained: the table shows "
            "each objective's scale and gradient size on the same batch, not quality."
        ),
    )
    demo.add_argument(
        "--data-dir",
        type=Path,
        default=DEFAULT_ROOT,
        metavar="DIR",
        help="folder with the Fashion-MNIST IDX files (default: %(default)s, "
        "installed by `sudo apt-get install dataset-fashion-mnist`)",
    )
    demo.add_argument(
        "--batch-size", type=_integer_at_least(2), default=256, help="images in the batch, >= 2 (default: %(default)s)"
    )
    demo.add_argument(
        "--dim", type=_integer_at_least(1), default=128, help="embedding dimension, >= 1 (default: %(default)s)"
    )
    demo.add_argument(
        "--seed", type=int, default=0, help="seed of the projection and augmentations (default: %(default)s)"
    )
    demo.set_defaults(run=_run_demo, parser=demo)

    _add_train(commands)
    _add_debias(commands)
    evaluate_command.add_parser(commands)
    bench_command.add_parser(commands)
    bound.add_parser(commands)

    toy = commands.add_parser(
        "toy",
        help="run a toy experiment of the theory",
        description="Toy experiments with a known true model, where the papers' claims can be checked exactly.",
        epilog="Run `uncurated toy TOY --help` for the options of a toy.",
    )
    toys = toy.add_subparsers(title="toys", dest="toy", required=True, metavar="TOY")
    _add_nuclr_toy(toys)
    _add_wpse_toy(toys)
    more_toys.add_dcl_toy(toys)
    more_toys.add_clip_margin_toy(toys)
    return parser


def _add_train(commands: argparse._SubParsersAction) -> None:
    from .train.config import FIELDS, PRESETS_DIR

    presets = ", ".join(sorted(path.stem for path in PRESETS_DIR.glob("*.yaml")))
    keys = ", ".join(name for name in FIELDS if name != "objective_params")
    train = commands.add_parser(
        "train",
        help="pretrain an encoder with any objective (two views or image-text), resumable",
        formatter_class=argparse.RawDescriptionHelpFormatter,
        description=(
            "Train as a preset says, with key=value overrides, then evaluate: a linear probe (next to raw\n"
            "pixels and an untrained model), kNN and the mean classifier; for image-text also zero-shot\n"
            "accuracy and retrieval recall (`uncurated eval RUN` adds margins and plots). Under torchrun\n"
            "(torchrun --nproc_per_node=N -m uncurated train ...) the processes share each batch.\n\n"
            "  uncurated train                                   # the default preset: fashion-mnist (DCL)\n"
            "  uncurated train preset=fashion-captions objective=clip\n"
            "  uncurated train objective=hcl objective.beta=0.5 epochs=2 batch_size=512\n"
            "  uncurated train name=my-run resume=true           # continue a killed run"
        ),
        epilog=f"presets: {presets}\nkeys: {keys}\nobjective parameters: objective.NAME=VALUE "
        "(see `uncurated objectives`); objective=clip and objective=simclr are InfoNCE across modalities "
        "and over two views",
    )
    train.add_argument("overrides", nargs="*", metavar="key=value", help="configuration overrides")
    train.set_defaults(run=_run_train, parser=train)


def _run_train(args: argparse.Namespace) -> int:
    from .train.distributed import end_training_process

    try:
        _train_from_arguments(args)
    except SystemExit as stop:
        end_training_process(stop.code)
        raise
    end_training_process(0)
    return 0


def _train_from_arguments(args: argparse.Namespace) -> None:
    from .train.config import ConfigError, load_config
    from .train.run import train

    from .data.skip import SkipLimitExceeded
    from .train.checkpoint import CheckpointError
    from .train.distributed import PeerLost
    from .train.trainer import CheckpointWriteError, NonFiniteError

    parser: argparse.ArgumentParser = args.parser
    try:
        config = load_config(args.overrides)
        train(config)
    except (ConfigError, FileNotFoundError) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    except (SkipLimitExceeded, NonFiniteError, CheckpointWriteError, CheckpointError, PeerLost) as error:
        # The run stopped on a fault it detected; its last good checkpoint is intact (see `resume=true`).
        parser.exit(1, f"{parser.prog}: stopped: {error}\n")


def _add_debias(commands: argparse._SubParsersAction) -> None:
    debias = commands.add_parser(
        "debias",
        help="zero-shot group metrics of a trained run before and after calibrated projection",
        description=(
            "Load an image-text run trained on dataset=fashion-spurious, project the spurious (background) "
            "directions out of its zero-shot class vectors (P0) and calibrate with attribute-swapped prompt "
            "pairs (Lemma 7.1), and report worst-group and average accuracy on the balanced test split."
        ),
    )
    debias.add_argument("run_dir", type=Path, nargs="?", metavar="RUN", help="the run folder (runs/NAME)")
    debias.add_argument(
        "--professions",
        action="store_true",
        help="instead of a run: calibrate the frozen all-MiniLM-L6-v2 on gendered profession prompts "
        "(needs pip install 'uncurated[minilm]')",
    )
    debias.add_argument(
        "--prompts", default="fashion-captions", help="prompt set name or YAML file (default: %(default)s)"
    )
    debias.add_argument(
        "--lam", type=_positive_float, default=1000.0, help="calibration strength lambda, > 0 (default: %(default)s)"
    )
    debias.add_argument("--out", type=Path, default=None, metavar="DIR", help="output folder (default: RUN)")
    debias.set_defaults(run=_run_debias, parser=debias)


def _run_debias(args: argparse.Namespace) -> int:
    from .debias.benchmark import debias_run, format_table, write_outputs
    from .train.checkpoint import CheckpointError
    from .train.config import ConfigError

    parser: argparse.ArgumentParser = args.parser
    if args.professions:
        return _run_professions(args)
    if args.run_dir is None:
        parser.error("give a RUN folder, or --professions")
    try:
        report = debias_run(args.run_dir, prompts=args.prompts, lam=args.lam)
    except (CheckpointError, ConfigError, FileNotFoundError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    print(format_table(report))
    json_path, png_path = write_outputs(report, args.out or args.run_dir)
    print(f"wrote {json_path} and {png_path}")
    return 0


def _run_professions(args: argparse.Namespace) -> int:
    from .debias.professions import profession_study
    from .models import MiniLMTextEncoder

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


def _add_nuclr_toy(toys: argparse._SubParsersAction) -> None:
    nuclr = toys.add_parser(
        "nuclr",
        help="NUCLR's toy: generalization error of MLE, GCL and learned popularities against n",
        description=(
            "NUCLR's toy experiment (seed 000, Sec. 3.3 and App. G.1). Anchors x are uniform on the upper "
            "half unit disk, contrasts y ~ p(y|x) = exp(x.y/tau)/Z(x) on [0, 1]^2 with an exact Z. For each "
            "sample size n, compare three empirical risks with the true risk L: MLE (Eq. 2, exact partition "
            "function), GCL (Eq. 5 with the uniform q~ = n) and NUCLR (Eq. 5 with q~ = exp(zeta*/tau) from "
            "Eq. 8). Prints |L_hat - L| per n and temperature, and writes nuclr_toy.png and nuclr_toy.json."
        ),
    )
    nuclr.add_argument(
        "--tau",
        type=_positive_float,
        nargs="+",
        default=[0.2, 1.0],
        metavar="TAU",
        help="temperatures of the true model, > 0, one panel each (default: 0.2 1.0)",
    )
    nuclr.add_argument(
        "--sizes",
        type=_integer_at_least(2),
        nargs="+",
        default=list(nuclr_toy.DEFAULT_SIZES),
        metavar="N",
        help=f"numbers of training pairs, >= 2 (default: {' '.join(map(str, nuclr_toy.DEFAULT_SIZES))})",
    )
    nuclr.add_argument(
        "--seed", type=_integer_at_least(0), default=0, help="seed of every draw, >= 0 (default: %(default)s)"
    )
    nuclr.add_argument(
        "--seeds",
        type=_integer_at_least(1),
        default=5,
        metavar="K",
        help="average the errors over K seeds, seed .. seed + K - 1, >= 1 (default: %(default)s)",
    )
    nuclr.add_argument(
        "--fresh-pairs",
        type=_integer_at_least(1),
        default=nuclr_toy.DEFAULT_FRESH_PAIRS,
        metavar="N",
        help="fresh pairs that estimate the true risk L, >= 1 (default: %(default)s)",
    )
    nuclr.add_argument(
        "--out",
        type=Path,
        default=Path("runs/toy-nuclr"),
        metavar="DIR",
        help="folder for nuclr_toy.png and nuclr_toy.json, created if missing (default: %(default)s)",
    )
    nuclr.set_defaults(run=_run_nuclr_toy)


def _add_wpse_toy(toys: argparse._SubParsersAction) -> None:
    wpse = toys.add_parser(
        "wpse",
        help="WPSE's toy: how close CLIP and weighted point sets get to PMI on a discrete joint",
        description=(
            "A synthetic experiment for WPSE (seed 002; digest 002, Sec. 7.2). X and Y have N items each and a "
            "random joint P = softmax(1.5 randn(N^2)) with a full-rank PMI table. Lookup-table encoders are "
            "trained with Adam on the exact population loss L of Eq. 2: CLIP (one unit vector per item), WPSE "
            "with M = 1, 4 and 8 points (Eq. 6, kernel 0.5 u.v + 0.5 Gaussian(0.5)) and linear-only WPSE with "
            "M = 8. Prints the gap L + I(X;Y) >= 0 (0 iff the similarity is PMI + const, Prop. 4.1) per model "
            "and seed, and writes wpse_toy.png and wpse_toy.json."
        ),
    )
    wpse.add_argument(
        "--seeds",
        type=_integer_at_least(0),
        nargs="+",
        default=list(wpse_toy.DEFAULT_SEEDS),
        metavar="SEED",
        help=f"seeds of the joint and the initializations, >= 0 "
        f"(default: {' '.join(map(str, wpse_toy.DEFAULT_SEEDS))})",
    )
    wpse.add_argument(
        "--steps",
        type=_integer_at_least(1),
        default=wpse_toy.DEFAULT_STEPS,
        help="Adam steps per fit, >= 1 (default: %(default)s)",
    )
    wpse.add_argument(
        "--items",
        type=_integer_at_least(2),
        default=wpse_toy.DEFAULT_ITEMS,
        metavar="N",
        help="items of X and of Y, >= 2 (default: %(default)s)",
    )
    wpse.add_argument(
        "--dim",
        type=_integer_at_least(1),
        default=wpse_toy.DEFAULT_DIM,
        metavar="D",
        help="dimension d of CLIP's vectors and of WPSE's points, >= 1 (default: %(default)s)",
    )
    wpse.add_argument(
        "--out",
        type=Path,
        default=Path("runs/toy-wpse"),
        metavar="DIR",
        help="folder for wpse_toy.png and wpse_toy.json, created if missing (default: %(default)s)",
    )
    wpse.set_defaults(run=_run_wpse_toy, parser=wpse)


def _run_objectives(args: argparse.Namespace) -> int:
    for spec in objectives.available():
        print(f"{spec.name}: {spec.summary}")
        print(f"    {format_parameters(spec.defaults)}")
    return 0


def _run_demo(args: argparse.Namespace) -> int:
    parser: argparse.ArgumentParser = args.parser
    try:
        images, _ = load_fashion_mnist(args.data_dir, split="test")
    except (FileNotFoundError, ValueError) as error:
        parser.exit(2, f"{parser.prog}: error: {error}\n")
    if args.batch_size > len(images):
        parser.error(f"argument --batch-size: the test split has {len(images)} images, got {args.batch_size}")
    rows = objective_table(images, batch_size=args.batch_size, dim=args.dim, seed=args.seed)
    print_objective_table(rows, batch_size=args.batch_size, dim=args.dim, seed=args.seed)
    return 0


def _run_nuclr_toy(args: argparse.Namespace) -> int:
    start = time.perf_counter()
    rows = []
    for tau in args.tau:
        runs = []
        for seed in range(args.seed, args.seed + args.seeds):

            def report(row: nuclr_toy.ToyRow, seed: int = seed) -> None:
                elapsed = time.perf_counter() - start
                print(
                    f"toy nuclr: tau = {row.tau:g}, n = {row.n}, seed {seed} done ({elapsed:.1f} s elapsed)",
                    file=sys.stderr,
                )

            runs.append(nuclr_toy.run_toy(tau, args.sizes, seed, fresh_pairs=args.fresh_pairs, progress=report))
        rows += nuclr_toy.average_over_seeds(runs)
    print(
        "NUCLR toy (seed 000, Sec. 3.3): x uniform on the upper half disk, y ~ exp(x.y/tau)/Z(x) on [0, 1]^2.\n"
        f"Each cell is |L_hat - L|, L the true risk (Eq. 3) on {args.fresh_pairs} fresh pairs, averaged over\n"
        f"{args.seeds} seed(s) from {args.seed}.\n"
        "MLE: Eq. 2 with the exact partition function. GCL: Eq. 5 with q~ = n. NUCLR: Eq. 5 with\n"
        "q~ = exp(zeta*/tau) from Eq. 8, scaled to the largest true popularity q (App. G.1).\n"
    )
    print(nuclr_toy.format_table(rows))
    settings = {
        "seed": args.seed,
        "seeds": args.seeds,
        "fresh_pairs": args.fresh_pairs,
        "taus": args.tau,
        "sizes": args.sizes,
    }
    write_toy_outputs(args.out, "nuclr_toy", rows, settings, nuclr_toy.plot_errors)
    return 0


def _run_wpse_toy(args: argparse.Namespace) -> int:
    if len(set(args.seeds)) != len(args.seeds):
        args.parser.error(f"argument --seeds: must be distinct, got {' '.join(map(str, args.seeds))}")
    start = time.perf_counter()

    def report(row: wpse_toy.WPSEToyRow) -> None:
        elapsed = time.perf_counter() - start
        print(
            f"toy wpse: {row.label}, seed {row.seed} done, gap {row.gap:.4g} ({elapsed:.1f} s elapsed)",
            file=sys.stderr,
        )

    rows = wpse_toy.run_wpse_toy(args.seeds, items=args.items, dim=args.dim, steps=args.steps, progress=report)
    information = {row.seed: row.mutual_information for row in rows}
    print(
        f"WPSE toy (seed 002; digest 002, Sec. 7.2): N = {args.items} items per side, "
        f"P = softmax({wpse_toy.JOINT_SCALE:g} randn(N^2)),\n"
        f"lookup-table encoders with points in R^{args.dim}, {args.steps} Adam steps (lr {wpse_toy.LEARNING_RATE:g}) "
        "on the exact loss L of Eq. 2.\n"
        "Each cell is the gap L + I(X;Y) >= 0, 0 iff G = PMI + const (Prop. 4.1); rank G is the largest\n"
        "numerical rank of the learned logits over the seeds (CLIP's is at most d, Prop. C.1).\n"
        "I(X;Y): " + ", ".join(f"seed {seed} {value:.4f}" for seed, value in information.items()) + "\n"
    )
    print(wpse_toy.format_gap_table(rows))
    settings = {
        "seeds": args.seeds,
        "steps": args.steps,
        "items": args.items,
        "dim": args.dim,
        "lr": wpse_toy.LEARNING_RATE,
        "mean_gaps": wpse_toy.mean_gaps(rows),
    }
    write_toy_outputs(args.out, "wpse_toy", rows, settings, wpse_toy.plot_gaps)
    return 0
