"""The learning gate: a suite's claims are judged only when its default run clearly learned.

Comparing objectives whose encoders have not learned yet measures noise
around an untrained network, so each training suite first has to show, in the
same report, that its default run beat what it was trained to beat:

* **two views**: the default run (InfoNCE at the large batch, clean data)
  has a linear probe at least :data:`TWO_VIEW_MARGIN` (2 points) above both
  the same probe on raw pixels and on the same encoder untrained;
* **image-text**: the default run (CLIP on clean captions) reaches at least
  :data:`ZERO_SHOT_FLOOR` (80%) zero-shot top-1, and its linear probe is not
  below the untrained encoder's.

Each comparison uses the mean over the default run's seeds; with two or more
seeds the two-view gate's sentence also gives the margin over the better
baseline per seed and its 95% Student-t interval. A suite that
fails the gate, or whose default run is missing, gets no verdicts; the
report says which number fell short.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

from .results import per_seed, summarize

#: How far the two-view default run's probe must be above pixels and the untrained encoder (accuracy).
TWO_VIEW_MARGIN = 0.02
#: The zero-shot top-1 the image-text default run must reach.
ZERO_SHOT_FLOOR = 0.80

#: The default run of each training suite: (role, objective key) of its arm.
DEFAULT_RUNS = {"two_view": ("large", "infonce"), "image_text": ("clean", "clip")}

#: ``lookup(suite, role, objective_key)`` -> ``{seed: report}`` of that arm.
Lookup = Callable[[str, str, str], dict]


@dataclass(frozen=True)
class Gate:
    """Whether a suite's default run learned (``None``: it did not run), and the sentence that says why."""

    suite: str
    passed: bool | None
    explanation: str


def learning_gates(lookup: Lookup) -> dict[str, Gate]:
    """The gate of each training suite (see the module's documentation)."""
    return {"two_view": _two_view_gate(lookup), "image_text": _image_text_gate(lookup)}


def _means(lookup: Lookup, suite: str, *names: str) -> list[float] | None:
    """The mean over seeds of each metric ``names`` of the suite's default run; ``None`` if any is missing."""
    role, key = DEFAULT_RUNS[suite]
    reports = lookup(suite, role, key)
    means = []
    for name in names:
        summary = summarize(per_seed(reports, name).values())
        if summary is None:
            return None
        means.append(summary.mean)
    return means


def _two_view_gate(lookup: Lookup) -> Gate:
    means = _means(
        lookup,
        "two_view",
        "linear_probe.accuracy",
        "linear_probe.raw_pixels_accuracy",
        "linear_probe.untrained_accuracy",
    )
    if means is None:
        return Gate("two_view", None, "The two-view default run (InfoNCE, large batch) did not run.")
    probe, pixels, untrained = means
    best_baseline = max(pixels, untrained)
    passed = probe - best_baseline >= TWO_VIEW_MARGIN
    measured = (
        f"the default run's linear probe (InfoNCE, large batch) is {100 * probe:.2f}% against "
        f"{100 * pixels:.2f}% on raw pixels and {100 * untrained:.2f}% for the same encoder untrained "
        f"({100 * (probe - best_baseline):+.2f} points over the better baseline{_margin_interval(lookup)}; "
        f"the gate asks for +{100 * TWO_VIEW_MARGIN:.0f})"
    )
    return _judged("two_view", passed, measured)


def _margin_interval(lookup: Lookup) -> str:
    """The per-seed margins over the better baseline and their 95% Student-t interval (two or more seeds)."""
    role, key = DEFAULT_RUNS["two_view"]
    reports = lookup("two_view", role, key)
    columns = [
        per_seed(reports, f"linear_probe.{name}") for name in ("accuracy", "raw_pixels_accuracy", "untrained_accuracy")
    ]
    seeds = sorted(set(columns[0]).intersection(*columns[1:]))
    margins = [columns[0][seed] - max(columns[1][seed], columns[2][seed]) for seed in seeds]
    summary = summarize(margins)
    if summary is None or summary.count < 2:
        return ""
    from scipy.stats import t

    half_width = float(t.ppf(0.975, summary.count - 1)) * summary.stderr
    per = ", ".join(f"{100 * margin:+.2f}" for margin in margins)
    return (
        f"; per seed {per}, paired over {summary.count} seeds {100 * summary.mean:+.2f} with 95% interval "
        f"[{100 * (summary.mean - half_width):+.2f}, {100 * (summary.mean + half_width):+.2f}]"
    )


def _image_text_gate(lookup: Lookup) -> Gate:
    means = _means(lookup, "image_text", "zero_shot.top1", "linear_probe.accuracy", "linear_probe.untrained_accuracy")
    if means is None:
        return Gate("image_text", None, "The image-text default run (CLIP, clean captions) did not run.")
    zero_shot, probe, untrained = means
    passed = zero_shot >= ZERO_SHOT_FLOOR and probe >= untrained
    measured = (
        f"the default run (CLIP, clean captions) reaches {100 * zero_shot:.2f}% zero-shot (the gate asks "
        f"for {100 * ZERO_SHOT_FLOOR:.0f}%) and a linear probe of {100 * probe:.2f}% against "
        f"{100 * untrained:.2f}% for the same encoder untrained"
    )
    return _judged("image_text", passed, measured)


def _judged(suite: str, passed: bool, measured: str) -> Gate:
    if passed:
        return Gate(suite, True, f"Learning gate passed: {measured}.")
    return Gate(
        suite,
        False,
        f"Learning gate NOT passed: {measured}. The encoders have not clearly learned at this "
        "budget, so this suite's claims get no verdict.",
    )
