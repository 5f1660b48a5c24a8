"""How a preset meets the command line: a preset is a recipe for its dataset, its pipeline and its objective.

Where the command line picks another dataset, the preset's keys of its own data (:data:`DATASET_KEYS`) are left
behind and the pipeline and augmentation the dataset's format registered (:mod:`.data_formats`) apply; where the
pipeline so changes, the objective becomes the pipeline's (:data:`PIPELINE_OBJECTIVES`) unless the command line
names one; where the objective changes, the preset's objective parameters (a temperature, say) stay with the
preset's objective. Each of these is said in a ``note:`` line, never done silently. Imports nothing of torch:
``--help`` and ``--dry-run`` read it.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any, Protocol

from ..engine_settings import NAMES as ENGINE_SETTINGS
from ..objective_aliases import resolve_alias
from .data_formats import FORMATS


class RunChoices(Protocol):
    """What of a training configuration (:class:`~uncurated.train.config.TrainConfig`) names and notes read."""

    preset: str
    dataset: str
    objective: str
    seed: int
    objective_params: dict[str, Any]


#: What an objective starts from in ``uncurated train`` where that differs from the library's default, which suits
#: a loop whose model holds the scale (open_clip's ``logit_scale``): a run's model has none, so CLIP's objective
#: learns its temperature from 0.07, as Radford et al. 2021 (Sec. 2.5) do.
RUN_DEFAULTS: dict[str, dict[str, Any]] = {"clip": {"learnable": True}}


def run_defaults(objective: str) -> dict[str, Any]:
    """The parameters ``objective`` starts from in a training run beyond its (or its alias's) own defaults."""
    return dict(RUN_DEFAULTS.get(objective, {}))


#: The keys a preset sets for its own dataset: they do not carry over to another one.
DATASET_KEYS = (
    "pipeline",
    "augment",
    "dataset_config",
    "data_dir",
    "image_size",
    "image_mode",
    "samples_per_shard",
    "steps_per_epoch",
    "train_subset",
)

#: The objective of each pipeline when the preset's was written for the other one.
PIPELINE_OBJECTIVES = {"two_view": "dcl", "image_text": "clip"}


def fit_preset(
    preset: str, values: dict[str, Any], command_line: dict[str, Any], defaults: dict[str, Any]
) -> list[str]:
    """Leave behind, in place, what of the preset's ``values`` belongs to a dataset, pipeline or objective other than
    the ones the ``command_line`` picks (``defaults``: the configuration's own, where the preset sets none); return
    the ``note:`` lines saying what was left behind and what replaced it."""
    notes = []
    own = {key: values.get(key, defaults[key]) for key in ("dataset", "pipeline", "objective")}
    dataset = command_line.get("dataset", own["dataset"])
    if dataset != own["dataset"]:
        left = {key: values.pop(key) for key in DATASET_KEYS if key in values and key not in command_line}
        taken = {key: value for key, value in _dataset_defaults(dataset).items() if key not in command_line}
        values.update(taken)
        said = [f"its {_listed(left)} left behind"] if left else []
        said += [f"dataset {dataset}'s {_listed(taken)}"] if taken else []
        notes.append(f"note: dataset={dataset} is not preset {preset}'s ({own['dataset']}): {'; '.join(said)}")
    pipeline = command_line.get("pipeline", values.get("pipeline", defaults["pipeline"]))
    objective = command_line.get("objective", own["objective"])
    if pipeline != own["pipeline"] and "objective" not in command_line and pipeline in PIPELINE_OBJECTIVES:
        objective = values["objective"] = PIPELINE_OBJECTIVES[pipeline]
    if objective != own["objective"]:
        notes.append(_leave_objective_parameters(preset, own["objective"], objective, values))
    return notes


def _dataset_defaults(dataset: str) -> dict[str, str]:
    """The pipeline and augmentation a run on ``dataset`` starts from, as its format registered them (none for a
    name no format has: the configuration refuses it)."""
    if dataset not in FORMATS:
        return {}
    return {"pipeline": FORMATS[dataset].pipeline, "augment": FORMATS[dataset].augment}


def _leave_objective_parameters(preset: str, own: str, objective: str, values: dict[str, Any]) -> str:
    """Leave the parameters of the preset's ``own`` objective behind (its engine settings stay: every objective
    takes them); the note saying so."""
    params = values.get("objective_params", {})
    left = {f"objective.{key}": value for key, value in params.items() if key not in ENGINE_SETTINGS}
    values["objective_params"] = {key: value for key, value in params.items() if key in ENGINE_SETTINGS}
    kept = f": its {_listed(left)} left behind" if left else ""
    return f"note: objective={objective} is not preset {preset}'s ({own}){kept}; {objective} starts from its defaults"


def _listed(values: dict[str, Any]) -> str:
    return ", ".join(f"{key}={value}" for key, value in values.items())


def default_run_name(config: RunChoices, preset_dataset: str | None = None) -> str:
    """``PRESET-OBJECTIVE-seedN`` for a run of its preset's dataset (``preset_dataset``), else
    ``DATASET-OBJECTIVE-seedN``: the name says what runs."""
    what = Path(config.preset).stem if config.dataset == preset_dataset else config.dataset
    return f"{what}-{config.objective}-seed{config.seed}"


#: Whose a default is, where an objective's name is not the paper it comes from: ``simclr`` and ``infonce`` start
#: from CLIP's temperature (Radford et al. 2021); SimCLR (Chen et al. 2020) trained at 0.5 on CIFAR-10 and at 0.1 on
#: ImageNet: no one value is SimCLR's, so the note names both.
DEFAULT_SOURCES: dict[tuple[str, str], str] = {
    ("simclr", "temperature"): (
        "CLIP's, Radford et al. 2021; SimCLR, Chen et al. 2020, used 0.5 on CIFAR-10, 0.1 on ImageNet"
    ),
    ("infonce", "temperature"): "CLIP's, Radford et al. 2021",
}


#: Whose a default is where :data:`DEFAULT_SOURCES` does not say.
PAPERS_OWN = "its paper's"


def paper_notes(config: RunChoices) -> list[str]:
    """One ``note:`` line per objective parameter whose value is not the objective's default, naming whose default
    it is: the objective's paper's, or :data:`DEFAULT_SOURCES`' (the engine's settings and the parameters without a
    default value are not a paper's)."""
    from ..objectives import OBJECTIVES

    name, implied = resolve_alias(config.objective)
    if name not in OBJECTIVES:
        return []
    defaults = {**OBJECTIVES[name].defaults(), **implied, **run_defaults(config.objective)}
    return [
        f"note: objective.{key}={value}, not {config.objective}'s default {defaults[key]} "
        f"({DEFAULT_SOURCES.get((config.objective, key), PAPERS_OWN)})"
        for key, value in config.objective_params.items()
        if key not in ENGINE_SETTINGS and defaults.get(key) is not None and value != defaults[key]
    ]
