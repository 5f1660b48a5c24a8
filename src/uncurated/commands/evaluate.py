"""``uncurated eval``: the whole evaluation suite on a run folder or on a saved feature file."""

from __future__ import annotations

import argparse
import dataclasses
import json
import sys
from pathlib import Path

from .arguments import add_source_arguments, integer_at_least, positive_float, usage_errors

#: Keys of a feature file: the classifier's, then the optional joint-space ones of an image-text model.
CLASSIFIER_KEYS = ("train_features", "train_labels", "test_features", "test_labels")
IMAGE_TEXT_KEYS = ("images", "labels", "captions", "caption_image", "class_prompts")

NAME = "eval"
HELP = "linear probe, kNN, mean classifier, zero-shot, retrieval, margins and plots of a trained model"
DESCRIPTION = (
    "Measure a trained run (or saved features) with every evaluation of the library: a linear probe\n"
    "(regularization searched on a validation split), weighted cosine kNN and the mean classifier on\n"
    "the run's probe features, next to raw pixels and an untrained model; the k-variance margins of\n"
    "Chuang 2023, ch. 8; for image-text runs zero-shot top-1/top-5 from prompt ensembles, Recall@1/5/10 both\n"
    "ways with 5 captions per test image over the distinct captions, and Chen et al. 2024's margins. Writes\n"
    "eval.json and PNGs (t-SNE, per-class accuracy, pair similarities, margins).\n\n"
    "  uncurated eval runs/fashion-mnist-dcl-seed0\n"
    "  uncurated eval features.pt --probe torch\n\n"
    f"A feature file is a torch.save-d dict with {', '.join(CLASSIFIER_KEYS)} ((N, d) features and\n"
    f"(N,) class indices) and optionally, for joint-space metrics, {', '.join(IMAGE_TEXT_KEYS)}\n"
    "(image embeddings and labels, caption embeddings, each caption's image index, and (K, P, d)\n"
    "prompt embeddings per class), and caption_ids (each caption's text id: repeated texts are\n"
    "retrieved as one caption)."
)
EPILOG = "Writes into --out (default: RUN/eval, or the feature file's folder)."
FORMATTER = argparse.RawDescriptionHelpFormatter


def add_arguments(parser: argparse.ArgumentParser) -> None:
    add_source_arguments(parser, "a feature file")
    # Checked by the evaluation (evaluate.suite.PROBES) when it runs: the command line does not load torch to list them.
    parser.add_argument("--probe", default="sklearn", help="linear probe: sklearn or torch (default: %(default)s)")
    # The kNN's defaults are evaluate.knn's (DEFAULT_K, DEFAULT_TEMPERATURE), taken when the command runs; the help
    # states them (tests/test_cli.py holds the two equal).
    parser.add_argument("--knn-k", type=integer_at_least(1), default=None, help="neighbours, >= 1 (default: 20)")
    parser.add_argument(
        "--knn-temperature", type=positive_float, default=None, help="kNN vote temperature, > 0 (default: 0.07)"
    )
    real = parser.add_argument_group(
        "real evaluation sets (image-text runs; also set at training time by the keys zero_shot_dir, "
        "zero_shot_classes, zero_shot_templates, retrieval_file, retrieval_images)"
    )
    real.add_argument("--zero-shot-dir", metavar="DIR", help="zero-shot on this image folder, one subfolder per class")
    real.add_argument(
        "--class-names",
        metavar="NAMES",
        help="its class names in the sorted folders' order: "
        "imagenet1k, cifar10, cifar100 or a file, one a line (default: the folder names)",
    )
    real.add_argument(
        "--templates",
        metavar="TEMPLATES",
        help="prompt templates: imagenet1k (CLIP's 80), cifar "
        "(CLIP's 18) or a file, one a line with {} for the class (default: the run's, imagenet1k)",
    )
    real.add_argument(
        "--retrieval",
        metavar="FILE",
        help="Recall@1/5/10 on Karpathy's dataset_coco.json or "
        "dataset_flickr30k.json (test split), or a CSV with a row per caption (filepath, title)",
    )
    real.add_argument(
        "--retrieval-images",
        metavar="DIR",
        help="the folder the retrieval images' paths are relative to (default: the file's folder)",
    )
    parser.add_argument(
        "--trust-python-encoders",
        action="store_true",
        help="rebuild a run whose encoders are "
        "python:module:function factories, which imports and runs that module's code",
    )


def run(args: argparse.Namespace) -> int:
    from ..evaluate import knn
    from ..evaluate.suite import PROBES

    if args.probe not in PROBES:
        args.parser.error(f"argument --probe: invalid choice: {args.probe!r} (choose from {', '.join(PROBES)})")
    options = {
        "probe": args.probe,
        "knn_k": knn.DEFAULT_K if args.knn_k is None else args.knn_k,
        "knn_temperature": knn.DEFAULT_TEMPERATURE if args.knn_temperature is None else args.knn_temperature,
    }
    with usage_errors(args.parser):
        if args.source.is_file():
            out = args.out or args.source.parent
            results = _evaluate_features(args.source, out, options)
        else:
            out = args.out or args.source / "eval"
            results = _evaluate_run(args.source, out, options, args)
    plots = results.get("plots", {}).get("files", [])
    (out / "eval.json").write_text(json.dumps(results, indent=2) + "\n")
    print(format_results(results))
    if plots:
        print(f"wrote {out / 'eval.json'} and {len(plots)} plots in {out}: {', '.join(plots)}")
    else:
        print(f"wrote {out / 'eval.json'} (no plots: they need a labelled test split, which the run's dataset lacks)")
    return 0


def _evaluate_run(folder: Path, out: Path, options: dict, args: argparse.Namespace) -> dict:
    import torch

    from ..train.evaluation import evaluate
    from ..train.real_sets import real_set_evaluation
    from ..train.restore import load_run

    restored = load_run(folder, trust_python_encoders=args.trust_python_encoders)
    real = {
        key: value
        for key, value in (
            ("zero_shot_dir", args.zero_shot_dir),
            ("zero_shot_classes", args.class_names),
            ("zero_shot_templates", args.templates),
            ("retrieval_file", args.retrieval),
            ("retrieval_images", args.retrieval_images),
        )
        if value is not None
    }
    config = dataclasses.replace(restored.config, **real)
    if not restored.has_test_split and not (config.zero_shot_dir or config.retrieval_file):
        raise ValueError(
            f"{folder}: its dataset has no labelled test split to evaluate on; give --zero-shot-dir or --retrieval"
        )
    results = {}
    if restored.has_test_split:
        results = evaluate(
            config,
            restored.model,
            restored.splits,
            torch.device("cpu"),
            augment=restored.augment,
            full=True,
            plots=out,
            say=_say,
            **options,
        )
    if config.zero_shot_dir or config.retrieval_file:
        _say("zero-shot and retrieval on the real sets")
        results.update(real_set_evaluation(config, restored.model, torch.device("cpu"), restored.image_shape))
    out.mkdir(parents=True, exist_ok=True)
    return results


def _say(message: str) -> None:
    print(f"eval: {message} ...", file=sys.stderr, flush=True)


def _evaluate_features(path: Path, out: Path, options: dict) -> dict:
    import torch

    from ..evaluate.suite import ClassifierFeatures, ImageTextFeatures, classifier_suite, image_text_suite, write_plots

    content = torch.load(path, map_location="cpu", weights_only=True)
    if not isinstance(content, dict):
        raise ValueError(f"{path} is not a feature file: it holds a {type(content).__name__}, not a dict")
    missing = [key for key in CLASSIFIER_KEYS if key not in content]
    if missing:
        raise ValueError(f"{path} is not a feature file: it lacks {', '.join(missing)}")
    features = ClassifierFeatures(*(content[key] for key in CLASSIFIER_KEYS))
    results = classifier_suite(features, **options)
    image_text = None
    present = [key for key in IMAGE_TEXT_KEYS if key in content]
    if present:
        if len(present) < len(IMAGE_TEXT_KEYS):
            lacking = ", ".join(key for key in IMAGE_TEXT_KEYS if key not in content)
            raise ValueError(
                f"{path}: joint-space metrics need all of {', '.join(IMAGE_TEXT_KEYS)}; it lacks {lacking}"
            )
        fields = {key: content[key] for key in IMAGE_TEXT_KEYS}
        image_text = ImageTextFeatures(**fields, caption_ids=content.get("caption_ids"))
        results.update(image_text_suite(image_text))
    written = write_plots(
        out,
        test_features=features.test_features,
        test_labels=features.test_labels,
        image_text=image_text,
        results={name: result for name, result in results.items() if name != "retrieval"},
    )
    results["plots"] = {"files": [path.name for path in written]}  # eval.json lists them
    return results


def format_results(results: dict) -> str:
    """One line per measurement."""
    lines = []
    for name in ("linear_probe", "knn", "mean_classifier", "zero_shot"):
        if name in results:
            result = results[name]
            line = (
                f"{name.replace('_', ' '):<16} top-1 {100 * result['accuracy']:6.2f}%  "
                f"mean per class {100 * result['mean_per_class_accuracy']:6.2f}%"
            )
            if result.get("top5_accuracy") is not None:
                line += f"  top-5 {100 * result['top5_accuracy']:6.2f}%"
            for baseline in ("raw_pixels_accuracy", "untrained_accuracy"):
                if baseline in result:
                    line += f"  {baseline.removesuffix('_accuracy').replace('_', ' ')} {100 * result[baseline]:.2f}%"
            lines.append(line)
    if "zero_shot_folder" in results:
        result = results["zero_shot_folder"]
        top5 = result["top5_accuracy"]
        lines.append(
            f"zero-shot folder top-1 {100 * result['accuracy']:6.2f}%"
            + (f"  top-5 {100 * top5:6.2f}%" if top5 is not None else "")
            + f"  ({result['images']} images, {result['classes']} classes, {result['templates']} templates)"
        )
    if "caption_retrieval" in results:
        result = results["caption_retrieval"]
        lines.append(
            "caption retrieval "
            + "  ".join(
                f"{key} {100 * value:.2f}%" for key, value in result.items() if key.endswith(("_r1", "_r5", "_r10"))
            )
            + f"  ({result['images']} images, {result['captions']} captions)"
        )
    if "retrieval" in results:
        lines.append(
            "retrieval        " + "  ".join(f"{key} {100 * value:.2f}%" for key, value in results["retrieval"].items())
        )
    if "kv_margins" in results:
        kv = results["kv_margins"]
        lines.append(
            f"kV margins       median kV-Margin {kv['kv_margin_median']:.4g}, kV-GN-Margin "
            f"{kv['kv_gn_margin_median']:.4g} ({kv['samples']} training samples)"
        )
    if "margins" in results:
        lines.append(
            "margins          "
            + "  ".join(
                f"{key} mean {value['mean']:.3f} (positive {100 * value['fraction_positive']:.1f}%)"
                for key, value in results["margins"].items()
            )
        )
    return "\n".join(lines)
