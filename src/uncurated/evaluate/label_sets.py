"""Class names and prompt templates for zero-shot classification on real label sets, shipped as data files.

``label_sets/`` holds, one entry a line (``#`` lines cite the source):
ImageNet-1k's 1,000 class names and CLIP's 80 ImageNet templates, CIFAR-10's
and CIFAR-100's class names and CLIP's 18 CIFAR templates. A template holds
``{}`` where the class name goes. :func:`class_names` and :func:`templates`
take a shipped name or the path of a file in the same format.
"""

from __future__ import annotations

import os
from pathlib import Path

FOLDER = Path(__file__).resolve().parent / "label_sets"

#: Shipped class-name lists, and the templates that go with each.
CLASS_NAMES = {"imagenet1k": "imagenet1k.txt", "cifar10": "cifar10.txt", "cifar100": "cifar100.txt"}
TEMPLATES = {"imagenet1k": "imagenet1k-templates.txt", "cifar": "cifar-templates.txt"}


def class_names(source: str | os.PathLike) -> list[str]:
    """The class names of a shipped list (:data:`CLASS_NAMES`) or of a file, in label order."""
    return _lines("class names", source, CLASS_NAMES)


def templates(source: str | os.PathLike) -> list[str]:
    """The prompt templates of a shipped set (:data:`TEMPLATES`) or of a file; each holds ``{}`` once."""
    found = _lines("templates", source, TEMPLATES)
    bad = [template for template in found if template.count("{}") != 1]
    if bad:
        raise ValueError(f"templates: every line must hold {{}} once (where the class name goes); {bad[0]!r} does not")
    return found


def prompts(names: list[str], patterns: list[str]) -> list[list[str]]:
    """Every template filled with every class name: one list of prompts per class."""
    return [[pattern.replace("{}", name) for pattern in patterns] for name in names]


def _lines(what: str, source: str | os.PathLike, shipped: dict[str, str]) -> list[str]:
    path = FOLDER / shipped[str(source)] if str(source) in shipped else Path(source)
    if not path.is_file():
        raise ValueError(f"{what} must be one of {', '.join(shipped)} or a text file, one a line; {source} is neither")
    lines = [line.strip() for line in path.read_text(encoding="utf-8").splitlines()]
    found = [line for line in lines if line and not line.startswith("#")]
    if not found:
        raise ValueError(f"{what}: {path} holds no entry")
    return found
