"""``uncurated bench``: the papers' central claims measured side by side in one report.

Three suites on the embedded data: two-view pretraining on Fashion-MNIST
(InfoNCE, DCL, HCL, RINCE and the supervised-negatives oracle, at two batch
sizes and under augmentation and label noise), image-text pretraining on the
generated FashionCaptions with structured noise (CLIP, SigLIP, CyCLIP, DCL,
SogCLR, iSogCLR, NUCLR, CLIP with and only the positive-pair regularizer,
WPSE), and the theory (the NUCLR, WPSE and CLIP-margin toys, Nozawa & Sato 2021's bound
against K on the trained InfoNCE model). The report
(``runs/bench-<preset>-<date>/report.md`` and a self-contained
``report.html``) gives a results table per suite, the plots, the exact
configuration and versions, the wall time per run and a claims table; each
claim is declared in :mod:`.registry` (paper's effect, SESOI, departures,
checks), its mechanism checked (:mod:`.manipulation`), and judged held,
reversed, absent or inconclusive (:mod:`.verdicts`) only from at least 3
seeds in a suite whose default run learned (:mod:`.claims` applies the rule,
:mod:`.gate` the learning gate).

Modules: :mod:`.presets` (tiny, quick, two-view, full, gpu, claims),
:mod:`.runner` (training and resuming), :mod:`.theory`, :mod:`.results` (the
one accessor of a run's metrics), :mod:`.gate`, :mod:`.registry`,
:mod:`.manipulation`, :mod:`.verdicts`, :mod:`.claims`, :mod:`.dotplot`,
:mod:`.report`.
"""

from typing import TYPE_CHECKING

from ..lazy import lazy_exports

if TYPE_CHECKING:
    from .claims import ClaimResult, Verdict, evaluate_claims
    from .presets import PRESETS, Preset, RunSpec, arms, plan_runs
    from .registry import REGISTRY, ClaimSpec
    from .report import write_report
    from .results import metric, summarize
    from .runner import BenchResults, default_out, run_bench

_EXPORTS = {
    "ClaimResult": ".claims",
    "Verdict": ".claims",
    "evaluate_claims": ".claims",
    "REGISTRY": ".registry",
    "ClaimSpec": ".registry",
    "PRESETS": ".presets",
    "Preset": ".presets",
    "RunSpec": ".presets",
    "arms": ".presets",
    "plan_runs": ".presets",
    "write_report": ".report",
    "metric": ".results",
    "summarize": ".results",
    "BenchResults": ".runner",
    "default_out": ".runner",
    "run_bench": ".runner",
}
__getattr__, __dir__ = lazy_exports(__name__, _EXPORTS)

__all__ = [
    "PRESETS",
    "REGISTRY",
    "BenchResults",
    "ClaimResult",
    "ClaimSpec",
    "Preset",
    "RunSpec",
    "Verdict",
    "arms",
    "default_out",
    "evaluate_claims",
    "metric",
    "plan_runs",
    "run_bench",
    "summarize",
    "write_report",
]
