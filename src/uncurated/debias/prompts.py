"""Prompt sets for debiasing (thesis Ch. 7, Tables A.5 to A.8 and A.10).

A prompt set names the classes, the *spurious prompts* whose embeddings are
the columns of ``A`` in ``P0`` (Section 7.2), and for each class the *pair
prompts*: prompts for that class that differ only in the spurious attribute.
Every unordered pair of one class's pair prompts is a pair ``(i, j)`` of the
set ``S`` of the calibration (eq. 7.3) and equalization (eq. 7.4) losses.

The built-in sets live in ``prompts/*.yaml`` next to this module:

- ``waterbirds`` and ``celeba`` (Tables A.5 and A.6);
- ``professions-gender`` and ``professions-race`` (Table A.8 over the 100
  professions of Table A.10, with its ``train``/``test`` split);
- ``fashion-captions``: dark and light backgrounds for this project's
  spurious FashionCaptions benchmark.

:func:`load_prompts` takes one of those names or the path of a YAML (or JSON)
file with the same keys:

``name``
    The set's name (defaults to the file's stem).
``classes``
    The class names, in label order. May be left out when ``splits`` is given;
    the classes are then the splits' classes in order.
``class_prompts`` or ``class_template``
    A mapping from every class to its zero-shot prompt, or one template with
    ``{}`` for the class name. Optional.
``spurious_prompts``
    A list of prompts naming only the spurious attribute. Optional (the
    generative sets use no ``P0``).
``pair_prompts`` or ``pair_templates``
    A mapping from every class to at least two prompts, or a list of at least
    two templates with ``{}`` for the class name. Required.
``attributes``, ``source``
    Descriptions, kept as given.
``splits``
    Optional mapping from a split name to a list of classes.
"""

from __future__ import annotations

import itertools
import json
import os
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import yaml

__all__ = ["PromptSet", "available_prompt_sets", "load_prompts"]

PROMPTS_DIR = Path(__file__).resolve().parent / "prompts"
"""Where the built-in prompt sets are stored, one ``NAME.yaml`` each."""

_KEYS = frozenset(
    {
        "name",
        "source",
        "attributes",
        "classes",
        "class_prompts",
        "class_template",
        "spurious_prompts",
        "pair_prompts",
        "pair_templates",
        "splits",
    }
)


@dataclass(frozen=True)
class PromptSet:
    """Prompts for debiasing one classification or generation task.

    ``pair_prompts[c]`` lists the prompts of class ``c`` that differ only in the
    spurious attribute; :meth:`pairs` enumerates the set ``S`` from them.
    """

    name: str
    classes: tuple[str, ...]
    pair_prompts: dict[str, tuple[str, ...]]
    class_prompts: dict[str, str] = field(default_factory=dict)
    spurious_prompts: tuple[str, ...] = ()
    attributes: tuple[str, ...] = ()
    splits: dict[str, tuple[str, ...]] = field(default_factory=dict)
    source: str = ""

    def pairs(self, classes: tuple[str, ...] | list[str] | None = None) -> list[tuple[str, str]]:
        """The pair set ``S``: every unordered pair of each class's pair prompts.

        ``classes`` restricts ``S`` to some classes (all by default).
        """
        chosen = self.classes if classes is None else tuple(classes)
        unknown = [c for c in chosen if c not in self.pair_prompts]
        if unknown:
            raise ValueError(f"classes must be classes of prompt set {self.name!r}; unknown: {unknown}")
        return [pair for c in chosen for pair in itertools.combinations(self.pair_prompts[c], 2)]

    def split(self, name: str) -> PromptSet:
        """The same set restricted to the classes of split ``name`` (e.g. ``"train"``)."""
        if name not in self.splits:
            accepted = ", ".join(map(repr, self.splits)) or "none"
            raise ValueError(f"split must be one of the splits of {self.name!r} ({accepted}); got {name!r}")
        classes = self.splits[name]
        return PromptSet(
            name=f"{self.name}/{name}",
            classes=classes,
            pair_prompts={c: self.pair_prompts[c] for c in classes},
            class_prompts={c: self.class_prompts[c] for c in classes if c in self.class_prompts},
            spurious_prompts=self.spurious_prompts,
            attributes=self.attributes,
            splits={},
            source=self.source,
        )


def available_prompt_sets() -> list[str]:
    """Names of the built-in prompt sets."""
    return sorted(path.stem for path in PROMPTS_DIR.glob("*.yaml"))


def load_prompts(source: str | os.PathLike[str]) -> PromptSet:
    """Load a built-in prompt set by name, or a user's YAML/JSON file by path.

    A string ending in ``.yaml``, ``.yml`` or ``.json``, or any ``PathLike``,
    is read as a file; any other string is a built-in name (see
    :func:`available_prompt_sets`). Raises ``ValueError`` for an unknown name,
    a missing file, or a file that leaves a class without prompts.
    """
    if isinstance(source, os.PathLike) or str(source).endswith((".yaml", ".yml", ".json")):
        path = Path(source)
        if not path.is_file():
            raise ValueError(f"source must name an existing prompt file, got {str(path)!r}")
    else:
        path = PROMPTS_DIR / f"{source}.yaml"
        if not path.is_file():
            raise ValueError(
                f"source must be a prompt file or one of {', '.join(map(repr, available_prompt_sets()))}; "
                f"got {source!r}"
            )
    text = path.read_text(encoding="utf-8")
    content = json.loads(text) if path.suffix == ".json" else yaml.safe_load(text)
    if not isinstance(content, dict):
        raise ValueError(f"prompt file {path} must hold a mapping of keys to values")
    return _build(content, default_name=path.stem, where=str(path))


def _strings(where: str, key: str, value: Any) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) and v.strip() for v in value):
        raise ValueError(f"{where}: {key} must be a list of non-empty strings, got {value!r:.120}")
    return tuple(value)


def _template(where: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or value.count("{}") != 1:
        raise ValueError(f"{where}: {key} must be a string with exactly one '{{}}' for the class name, got {value!r}")
    return value


def _per_class(where: str, key: str, mapping: Any, classes: tuple[str, ...]) -> dict[str, Any]:
    """Check that ``mapping`` has exactly one entry for every class."""
    if not isinstance(mapping, dict):
        raise ValueError(f"{where}: {key} must map every class to its prompts, got {mapping!r:.120}")
    missing = [c for c in classes if c not in mapping]
    if missing:
        raise ValueError(f"{where}: {key} has no prompts for classes {missing}")
    extra = [c for c in mapping if c not in classes]
    if extra:
        raise ValueError(f"{where}: {key} names classes that are not in classes: {extra}")
    return {c: mapping[c] for c in classes}


def _build(content: dict[str, Any], *, default_name: str, where: str) -> PromptSet:
    unknown = sorted(set(content) - _KEYS)
    if unknown:
        raise ValueError(f"{where}: unknown keys {unknown}; accepted keys are {sorted(_KEYS)}")

    splits_raw = content.get("splits", {})
    if not isinstance(splits_raw, dict):
        raise ValueError(f"{where}: splits must map split names to lists of classes, got {splits_raw!r:.120}")
    splits = {str(k): _strings(where, f"splits[{k!r}]", v) for k, v in splits_raw.items()}
    if "classes" in content:
        classes = _strings(where, "classes", content["classes"])
    else:
        classes = tuple(c for members in splits.values() for c in members)
    if not classes:
        raise ValueError(f"{where}: classes must list at least one class (directly or through splits)")
    if len(set(classes)) != len(classes):
        raise ValueError(f"{where}: classes must be distinct, got {list(classes)}")
    for split, members in splits.items():
        outside = [c for c in members if c not in classes]
        if outside:
            raise ValueError(f"{where}: split {split!r} names classes that are not in classes: {outside}")

    if "pair_prompts" in content and "pair_templates" in content:
        raise ValueError(f"{where}: give either pair_prompts or pair_templates, not both")
    if "pair_templates" in content:
        templates = _strings(where, "pair_templates", content["pair_templates"])
        templates = tuple(_template(where, "pair_templates", t) for t in templates)
        pair_prompts = {c: tuple(t.format(c) for t in templates) for c in classes}
    elif "pair_prompts" in content:
        raw = _per_class(where, "pair_prompts", content["pair_prompts"], classes)
        pair_prompts = {c: _strings(where, f"pair_prompts[{c!r}]", v) for c, v in raw.items()}
    else:
        raise ValueError(f"{where}: pair_prompts or pair_templates is required")
    for c, prompts in pair_prompts.items():
        if len(set(prompts)) < 2:
            raise ValueError(f"{where}: class {c!r} needs at least two distinct pair prompts, got {list(prompts)}")

    if "class_prompts" in content and "class_template" in content:
        raise ValueError(f"{where}: give either class_prompts or class_template, not both")
    if "class_template" in content:
        template = _template(where, "class_template", content["class_template"])
        class_prompts = {c: template.format(c) for c in classes}
    elif "class_prompts" in content:
        raw = _per_class(where, "class_prompts", content["class_prompts"], classes)
        class_prompts = {c: _strings(where, f"class_prompts[{c!r}]", [v])[0] for c, v in raw.items()}
    else:
        class_prompts = {}

    return PromptSet(
        name=str(content.get("name", default_name)),
        classes=classes,
        pair_prompts=pair_prompts,
        class_prompts=class_prompts,
        spurious_prompts=_strings(where, "spurious_prompts", content.get("spurious_prompts", [])),
        attributes=_strings(where, "attributes", content.get("attributes", [])),
        splits=splits,
        source=str(content.get("source", "")),
    )
