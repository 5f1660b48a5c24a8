"""The bench presets: which runs each suite trains, on what budget, and the theory settings.

A preset is plain data. :func:`plan_runs` expands it into one :class:`RunSpec`
per (arm, seed); an *arm* is an objective under a *condition* (a batch size,
a kind of noise, a data set-up). Every run of a suite shares the suite's base
overrides (encoders, budget, evaluation), so objectives differ only in the
objective keys of their arm.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from .gate import DEFAULT_RUNS
from .registry import CLAIM_ARMS, REGISTRY

SUITES = ("two_view", "image_text", "theory")
SUITE_TITLES = {"two_view": "two-view", "image_text": "image-text", "theory": "theory"}


@dataclass(frozen=True)
class Arm:
    """One objective under one condition: ``key`` names its runs, ``overrides`` are its ``key=value`` settings."""

    suite: str
    role: str  # the condition's role ("large", "small", "aug_noise", "label", "label_noise"; "noisy", "clean", ...)
    condition: str  # the condition as the report shows it
    objective_key: str  # a key of TWO_VIEW_OBJECTIVES or IMAGE_TEXT_OBJECTIVES
    objective: str  # the row label of the results table
    key: str
    overrides: tuple[str, ...]


@dataclass(frozen=True)
class RunSpec:
    """One training run of the bench: an arm at one seed."""

    arm: Arm
    seed: int

    @property
    def name(self) -> str:
        return f"{self.arm.key}-seed{self.seed}"

    @property
    def suite(self) -> str:
        return self.arm.suite


@dataclass(frozen=True)
class Preset:
    """Everything a bench invocation runs (see the module's documentation)."""

    name: str
    description: str
    estimate: str
    seeds: tuple[int, ...]  # the seeds of the arms the claims and the learning gates read
    test_size: int  # a stratified subset of the Fashion-MNIST test split; 0 keeps all 10,000 images
    two_view_base: tuple[str, ...]
    batch_sizes: tuple[int, int]  # (small, large)
    two_view_conditions: dict[str, tuple[str, tuple[str, ...]]]  # role -> (shown name, extra overrides)
    two_view_arms: dict[str, tuple[str, ...]]  # role -> objective keys of TWO_VIEW_OBJECTIVES
    image_text_base: tuple[str, ...]
    image_text_conditions: dict[str, tuple[str, tuple[str, ...]]]
    image_text_arms: dict[str, tuple[str, ...]]  # role -> objective keys of IMAGE_TEXT_OBJECTIVES
    nuclr_epochs_setting: bool = True  # pass the run's epochs to NUCLR's zeta schedule
    nuclr_freeze_epochs: float = 0.5  # epochs NUCLR's zeta stays frozen (Wang et al. 2025: 5 of 30)
    theory: dict[str, Any] = field(default_factory=dict)
    seconds_per_run: dict[str, float] = field(default_factory=dict)  # ETA priors, per suite
    suite_seeds: dict[str, int] = field(default_factory=dict)  # at most this many seeds for a suite's arms
    other_arm_seeds: int = 0  # seeds of the arms no claim reads (results-table rows only); 0: all of them
    suites: tuple[str, ...] = SUITES  # the suites a bench runs when --suites is not given
    require_declared_seeds: bool = False  # refuse to start when a claim's arms run on fewer seeds than it declares


#: Two-view objectives: label and overrides. DCL and HCL at tau_plus = 0.1 (about 1/C) and t = 0.5, as the thesis.
TWO_VIEW_OBJECTIVES: dict[str, tuple[str, tuple[str, ...]]] = {
    "infonce": ("InfoNCE", ("objective=simclr",)),
    "dcl": ("DCL", ("objective=dcl", "objective.tau_plus=0.1")),
    "hcl-b0.5": ("HCL beta=0.5", ("objective=hcl", "objective.beta=0.5", "objective.tau_plus=0.1")),
    "hcl-b1": ("HCL beta=1", ("objective=hcl", "objective.beta=1.0", "objective.tau_plus=0.1")),
    "rince-q0.1": ("RINCE q=0.1", ("objective=rince", "objective.q=0.1")),
    "rince-q0.5": ("RINCE q=0.5", ("objective=rince", "objective.q=0.5")),
    "rince-q1": ("RINCE q=1", ("objective=rince", "objective.q=1.0")),
    "oracle": ("InfoNCE + oracle negatives", ("objective=simclr", "oracle_negatives=true")),
}

#: Image-text objectives on FashionCaptions: label and overrides (the preset's learnable CLIP temperature from 0.07).
IMAGE_TEXT_OBJECTIVES: dict[str, tuple[str, tuple[str, ...]]] = {
    "clip": ("CLIP", ("objective=clip",)),
    "siglip": ("SigLIP", ("objective=siglip", "objective.learnable=false")),
    "cyclip": ("CyCLIP", ("objective=cyclip",)),
    "dcl": (
        "DCL (t=0.1)",
        ("objective=dcl", "objective.tau_plus=0.1", "objective.temperature=0.1", "objective.learnable=false"),
    ),
    "sogclr": ("SogCLR", ("objective=sogclr",)),
    "isogclr": ("iSogCLR", ("objective=isogclr",)),
    # zeta: the authors' exponential average (theta 0.9) on the paper's Eq. 14 gradient, the paper's xi rule.
    "nuclr": (
        "NUCLR (zeta EMA 0.9, paper's xi)",
        ("objective=nuclr", "objective.zeta_update=ema", "objective.xi_rule=paper"),
    ),
    "clip-reg": ("CLIP + regularizer", ("objective=clip_reg", "objective.lam=0.1")),
    "reg-only": ("regularizer alone", ("objective=clip_reg", "objective.lam=0.1", "objective.variant=only")),
    # WPSE on the frozen MiniLM tower, as CLIP: the token states are the caption's points, a trained point-set
    # head weighs them; the image's points are the ResNet's cells with a learned embedding per position
    # (benchmarks/wpse_ladder.py: without one, the set loses the image's layout and 12 points of zero-shot).
    "wpse": ("WPSE (frozen MiniLM token states)", ("objective=clip", "point_sets=true")),
}

_TWO_VIEW_COMMON = ("preset=fashion-mnist", "objective.temperature=0.5", "probe_layer=stages")
#: The two-view runs on Fashion-MNIST in clutter (data/fashion_clutter.py), a setting built for small scale: the
#: recipe and budget whose InfoNCE run passes raw pixels and the untrained encoder by 6.8 points over 3 seeds
#: (benchmarks/clutter_design.py). Quick's default run and every run of the two-view preset.
CLUTTER_TRAIN_SUBSET = 6000
CLUTTER_EPOCHS = 2
_CLUTTER_BASE = (
    "preset=fashion-clutter",
    "objective.temperature=0.5",
    "probe_layer=stages",
    f"train_subset={CLUTTER_TRAIN_SUBSET}",
    f"epochs={CLUTTER_EPOCHS}",
    "probe_train_size=2000",
    "log_every=5",
)
_IMAGE_TEXT_COMMON = ("preset=fashion-captions",)
#: The fixed temperature every image-text arm of quick, full and gpu trains at (fashion-captions' CLIP recipe).
IMAGE_TEXT_TEMPERATURE = 0.2
#: The main noisy image-text condition: structured noise that matters at this scale (uniform mismatch barely does).
NOISY = ("mismatch_fraction=0.2", "mismatch_mode=confusable", "imbalance_ratio=10", "duplicate_fraction=0.1")
CLEAN = ("mismatch_fraction=0.0", "imbalance_ratio=1.0", "duplicate_fraction=0.0")


def _image_text_recipe(probe_train_size: int) -> tuple[str, ...]:
    """The image-text runs of quick and full: 24,000 FashionCaptions pairs (the noisy condition's long tail keeps
    24,523 of the 60,000), 1.5 epochs at batch 64, every objective at the preset's fixed t = 0.2 (named here: an
    objective other than the preset's CLIP starts from its own defaults); the presets differ only in the probes'
    training images."""
    return _IMAGE_TEXT_COMMON + (
        f"objective.temperature={IMAGE_TEXT_TEMPERATURE}",
        "train_subset=24000",
        "epochs=1.5",
        "batch_size=64",
        "warmup_epochs=0.1",
        f"probe_train_size={probe_train_size}",
        "probe_layer=encoder",
        "log_every=20",
    )


def _two_view_conditions(small: int, large: int, label_noise: float = 0.8) -> dict[str, tuple[str, tuple[str, ...]]]:
    return {
        "large": (f"clean, batch {large}", (f"batch_size={large}",)),
        "small": (f"clean, batch {small}", (f"batch_size={small}",)),
        "aug_noise": ("augmentation noise eta=0.4", (f"batch_size={large}", "noise_eta=0.4")),
        "label": ("label positives, clean labels", (f"batch_size={large}", "positives=label")),
        "label_noise": (
            f"label positives, label noise eta={label_noise:g}",
            (f"batch_size={large}", "positives=label", f"label_noise={label_noise:g}"),
        ),
    }


def _arms_by_condition(large_arms, small_arms, noise_arms) -> dict[str, tuple[str, ...]]:
    return {
        "large": large_arms,
        "small": small_arms,
        "aug_noise": noise_arms,
        "label": noise_arms,
        "label_noise": noise_arms,
    }


#: The two-view arms the claims read (:mod:`.registry`): HCL (beta = 1) beside DCL and InfoNCE at the small batch,
#: RINCE at q = 1 and 0.5 beside InfoNCE clean and under each noise.
CLAIMS_SMALL = ("infonce", "dcl", "hcl-b1")
CLAIMS_NOISE = ("infonce", "rince-q0.5", "rince-q1")

_NOISY_NAME = "noisy: 20% confusable mismatch, imbalance 10, 10% duplicates"
_IMAGE_TEXT_CONDITIONS = {
    "noisy": (_NOISY_NAME, NOISY),
    "clean": ("clean", CLEAN),
    "uniform": ("20% uniform mismatch only", ("mismatch_fraction=0.2", "mismatch_mode=uniform")),
}
_ALL_IMAGE_TEXT = tuple(IMAGE_TEXT_OBJECTIVES)

TINY = Preset(
    name="tiny",
    description="a smoke test, not a measurement: 256 digits (two views) and 128 FashionCaptions pairs, tiny "
    "encoders, a few steps per run, a 200-image test split; every suite.",
    estimate="one to three minutes on 2 CPU cores (mostly each run's evaluation)",
    seeds=(0,),
    test_size=200,
    two_view_base=(
        "preset=digits",
        "objective.temperature=0.5",
        "train_subset=256",
        "epochs=1",
        "probe_train_size=256",
        "widths=[64, 32]",
        "projection_dim=32",
        "log_every=2",
    ),
    batch_sizes=(16, 64),
    two_view_conditions=_two_view_conditions(16, 64),
    two_view_arms=_arms_by_condition(
        ("infonce", "dcl", "hcl-b0.5", "hcl-b1", "rince-q0.5", "rince-q1", "oracle"), CLAIMS_SMALL, CLAIMS_NOISE
    ),
    image_text_base=_IMAGE_TEXT_COMMON
    + (
        f"objective.temperature={IMAGE_TEXT_TEMPERATURE}",
        "widths=[8, 8]",
        "blocks=[1, 1]",
        "text_width=16",
        "text_heads=2",
        "text_layers=1",
        "projection_dim=16",
        "batch_size=32",
        "epochs=1",
        "train_subset=128",
        "probe_train_size=100",
        "probe_layer=encoder",
        "wpse_features=64",
        "log_every=2",
    ),
    image_text_conditions={"noisy": (_NOISY_NAME, NOISY), "clean": ("clean", CLEAN)},
    image_text_arms={"noisy": _ALL_IMAGE_TEXT, "clean": ("clip",)},
    theory={
        "nuclr": {"taus": (0.2,), "sizes": (50, 100), "seeds": 1, "fresh_pairs": 2000},
        "wpse": {"seeds": (0,), "steps": 30},
        "clip_margin": {
            "seeds": (0,),
            "temperatures": (0.01, 0.05),
            "steps": 30,
            "train_pairs": 256,
            "test_pairs": 128,
        },
        "bound": {"negatives": (16, 32, 64), "augmentations": 2, "train_samples": 100, "epochs": 1},
    },
    seconds_per_run={"two_view": 3.0, "image_text": 4.0, "theory": 10.0},
)

QUICK = Preset(
    name="quick",
    description="what `make demo` runs. Image-text: the claims' arms over 3 seeds with the default recipe (frozen "
    "MiniLM text tower, t 0.2) on 24,000 FashionCaptions pairs for 1.5 epochs at batch 64, WPSE on the same "
    "tower. Two views: the default InfoNCE run on one seed on Fashion-MNIST in clutter (6,000 images, 2 epochs), "
    "which shows where the encoder stands against its baselines (the two-view claims run in `two-view`). A "
    "2,000-image stratified test split.",
    estimate="about 12 minutes on 2 CPU cores (measured 12 min 07 s idle on 2026-11-27: 22 runs, WPSE's three "
    "about a minute each, the two-view run on Fashion-MNIST in clutter, and the theory; `make demo` from a fresh "
    "clone, the environment included, 13 min 30 s)",
    seeds=(0, 1, 2),
    suite_seeds={"two_view": 1},
    test_size=2000,
    two_view_base=_CLUTTER_BASE,
    batch_sizes=(64, 256),
    two_view_conditions=_two_view_conditions(64, 256),
    two_view_arms={"large": ("infonce",)},
    image_text_base=_image_text_recipe(probe_train_size=1000),
    image_text_conditions={"noisy": (_NOISY_NAME, NOISY), "clean": ("clean", CLEAN)},
    image_text_arms={
        "noisy": ("clip", "sogclr", "nuclr", "clip-reg", "reg-only", "wpse"),
        "clean": ("clip",),
    },
    theory={
        "nuclr": {"taus": (0.2, 1.0), "sizes": (50, 100, 200, 400), "seeds": 2, "fresh_pairs": 20000},
        "wpse": {"seeds": (0,), "steps": 600},
        "clip_margin": {"seeds": (0,), "steps": 600},
        "bound": {"negatives": (16, 32, 64, 128, 256), "augmentations": 4, "train_samples": 2000, "epochs": 2},
    },
    seconds_per_run={"two_view": 40.0, "image_text": 30.0, "theory": 90.0},
)

FULL = Preset(
    name="full",
    description="five seeds for the image-text claims (a 95% interval of about +-0.7 points needs them at this "
    "spread), three for the two-view ones; image-text: quick's runs (24,000 FashionCaptions pairs, 1.5 epochs at "
    "batch 64); two views: 30,000 training images for 1 epoch; every objective and condition, RINCE at "
    "three q, CLIP and NUCLR on clean data beside the noisy; arms no claim reads on one seed; a 5,000-image "
    "stratified test split and 5,000-image probes.",
    estimate="about 1 h 25 min on 2 idle CPU cores: its image-text suite measured 34 min, the rest from run times",
    seeds=(0, 1, 2, 3, 4),
    suite_seeds={"two_view": 3},
    other_arm_seeds=1,
    test_size=5000,
    two_view_base=_TWO_VIEW_COMMON + ("train_subset=30000", "epochs=1", "probe_train_size=5000", "log_every=10"),
    batch_sizes=(64, 256),
    two_view_conditions=_two_view_conditions(64, 256),
    two_view_arms=_arms_by_condition(
        ("infonce", "dcl", "hcl-b0.5", "hcl-b1", "rince-q0.1", "rince-q0.5", "rince-q1", "oracle"),
        CLAIMS_SMALL,
        CLAIMS_NOISE,
    ),
    image_text_base=_image_text_recipe(probe_train_size=5000),
    image_text_conditions=_IMAGE_TEXT_CONDITIONS,
    image_text_arms={"noisy": _ALL_IMAGE_TEXT, "clean": ("clip", "nuclr"), "uniform": ("clip",)},
    theory={
        "nuclr": {"taus": (0.2, 1.0), "sizes": (50, 100, 200, 400, 800), "seeds": 3, "fresh_pairs": 50000},
        "wpse": {"seeds": (0, 1, 2), "steps": 1000},
        "clip_margin": {"seeds": (0, 1, 2), "steps": 600},
        "bound": {"negatives": (16, 32, 64, 128, 256, 512), "augmentations": 4, "train_samples": 3000, "epochs": 3},
    },
    seconds_per_run={"two_view": 60.0, "image_text": 65.0, "theory": 300.0},
)

GPU_TWO_VIEW_ARMS = CLAIMS_NOISE
"""The large-batch arms the claims read: InfoNCE and RINCE clean, beside their noisy runs."""
GPU_EPOCHS = 6

GPU = Preset(
    name="gpu",
    description="sized for one H100; runs the two-view suite unless --suites names others. All 60,000 "
    "Fashion-MNIST training images held on the GPU (data_on_device=true), kornia's augmentations there, a "
    f"ResNet-18-size encoder (widths 64 to 512, two blocks per stage, 15.6 M parameters with its head) for "
    f"{GPU_EPOCHS} epochs at batch 512 (128 for the small-batch arms), every two-view claim's arms over 3 "
    "seeds, a 5,000-image stratified test split and 3,000-image probes. Its image-text and theory suites, "
    "when asked for, are quick's.",
    estimate="about 32 minutes on one H100, predicted, not measured (no GPU has run it yet): 45 runs of "
    f"{GPU_EPOCHS} epochs, 36 at batch 512 and 9 at batch 128. Training, 18 min: 5.5 GFLOP per sample and "
    "step (two views, forward and backward, counted by torch.utils.flop_counter) at an assumed 150 TFLOP/s of "
    "bf16 convolutions (15% of the H100's dense peak, for 28 x 28 maps), plus an assumed 10 ms of launches "
    "and synchronizations per step: 3.4 s per epoch at batch 512, 6.9 s at 128. Evaluation on the CPU with "
    "one BLAS thread, 14 min: 16 s per run (one probe of 5,000 x 3,840 features took 124 s on 2 shared cores "
    "under load 22, about 11 s of an idle core, scaled to 3,000 rows, with kNN and the margins), 3 s to build "
    "each run, and the baselines' two probes in the 3 default runs",
    seeds=(0, 1, 2),
    suites=("two_view",),
    other_arm_seeds=1,
    test_size=5000,
    two_view_base=_TWO_VIEW_COMMON
    + (
        "data_on_device=true",
        "widths=[64, 128, 256, 512]",
        "blocks=[2, 2, 2, 2]",
        f"epochs={GPU_EPOCHS}",
        "probe_train_size=3000",
        "log_every=20",
    ),
    batch_sizes=(128, 512),
    two_view_conditions=_two_view_conditions(128, 512),
    two_view_arms=_arms_by_condition(GPU_TWO_VIEW_ARMS, CLAIMS_SMALL, CLAIMS_NOISE),
    image_text_base=QUICK.image_text_base,
    image_text_conditions=QUICK.image_text_conditions,
    image_text_arms=QUICK.image_text_arms,
    theory=QUICK.theory,
    seconds_per_run={"two_view": 45.0, "image_text": 30.0, "theory": 90.0},
)

TWO_VIEW = Preset(
    name="two-view",
    description="the thesis's two-view claims on Fashion-MNIST in clutter (`dataset=fashion-clutter`: each garment "
    "at a random position, scale and colour on tiles of other garments, 32 x 32 RGB), a setting built for small "
    "scale, NOT the thesis's CIFAR-10 (Chuang 2023): InfoNCE, DCL and HCL (beta 1) at the small batch, InfoNCE "
    "and RINCE (q 0.5 and 1) clean and under each noise, at "
    f"t 0.5 on {CLUTTER_TRAIN_SUBSET:,} training images for {CLUTTER_EPOCHS:g} epochs at batch 256 (64 for the "
    "small-batch arms), clean, under augmentation noise and with label-defined positives under clean and noisy "
    "labels; every arm a claim or the learning gate reads on 3 seeds, the oracle on one; 2,000-image probes "
    "and a 2,000-image stratified test split. Two-view suite only.",
    estimate="about 41 minutes on 2 idle CPU cores (46 runs one after another, 40 to 60 s of CPU each on one "
    "thread, training and evaluation); its 40 runs before RINCE q 1 and HCL moved to the small batch measured "
    "56 min 01 s with OMP_NUM_THREADS=1 on 2 cores shared with other jobs (load average 2.2 to 7.5, mean 5.4), "
    "2026-11-27",
    seeds=(0, 1, 2),
    suites=("two_view",),
    other_arm_seeds=1,
    test_size=2000,
    two_view_base=_CLUTTER_BASE,
    batch_sizes=(64, 256),
    two_view_conditions=_two_view_conditions(64, 256),
    two_view_arms=_arms_by_condition(CLAIMS_NOISE + ("oracle",), CLAIMS_SMALL, CLAIMS_NOISE),
    image_text_base=QUICK.image_text_base,
    image_text_conditions=QUICK.image_text_conditions,
    image_text_arms=QUICK.image_text_arms,
    theory=QUICK.theory,
    seconds_per_run={"two_view": 60.0, "image_text": 30.0, "theory": 90.0},
)

#: The claims preset's image-text regime, where NUCLR's zeta and SogCLR's u act: 5,760 pairs (90 batches of 64) for
#: 12 epochs (each sample's u updated 12 times, zeta 10 times after a freeze of 2 epochs, a sixth of training, as
#: the paper's 5 of 30), every objective at the fixed t 0.07 of Wang et al. 2025's grid and Chen et al. 2024.
CLAIMS_IMAGE_TEXT_PAIRS = 5760
CLAIMS_IMAGE_TEXT_EPOCHS = 12
CLAIMS_ZETA_FREEZE = 2
_CLAIMS_IMAGE_TEXT = _IMAGE_TEXT_COMMON + (
    f"train_subset={CLAIMS_IMAGE_TEXT_PAIRS}",
    f"epochs={CLAIMS_IMAGE_TEXT_EPOCHS}",
    "batch_size=64",
    "warmup_epochs=0.5",
    "probe_train_size=5000",
    "probe_layer=encoder",
    "log_every=50",
    "objective.temperature=0.07",  # CLIP's stays fixed: the recipe's learnable=false reaches every objective taking it
)

CLAIMS = Preset(
    name="claims",
    description="every claim in the regime its registry declaration designs, with the seeds it declares: "
    f"image-text on {CLAIMS_IMAGE_TEXT_PAIRS:,} FashionCaptions pairs for {CLAIMS_IMAGE_TEXT_EPOCHS} epochs at "
    f"batch 64 and t 0.07 fixed (zeta frozen {CLAIMS_ZETA_FREEZE} epochs, so each sample's u is updated 12 "
    "times and zeta 10), the image-text claims' arms over 5 seeds; two views on Fashion-MNIST in clutter as "
    "`two-view`, with label noise 1.0 (0.8 cost InfoNCE 0.9 points) and RINCE at q 1 beside q 0.5, every arm "
    "over 3 seeds; all 10,000 test images; refuses to start if a claim's arms would run on fewer seeds than it "
    "declares.",
    estimate="about 85 minutes on 2 idle CPU cores, predicted from per-run times, not measured: 35 image-text "
    "runs of 1,080 steps (quick's runs of 562 steps took 23 to 29 s, WPSE's 51 to 56 s, on 2 idle cores; "
    "about 45 s each, 90 s for WPSE, 30 min), 46 two-view runs as `two-view` (40 to 60 s each, 41 min), the "
    "theory (3 min) and the full test split's evaluation (about 8 s more per run, 11 min)",
    seeds=(0, 1, 2, 3, 4),
    suite_seeds={"two_view": 3},
    other_arm_seeds=1,
    test_size=0,
    two_view_base=_CLUTTER_BASE,
    batch_sizes=(64, 256),
    two_view_conditions=_two_view_conditions(64, 256, label_noise=1.0),
    two_view_arms=_arms_by_condition(CLAIMS_NOISE + ("oracle",), CLAIMS_SMALL, CLAIMS_NOISE),
    image_text_base=_CLAIMS_IMAGE_TEXT,
    image_text_conditions={"noisy": (_NOISY_NAME, NOISY), "clean": ("clean", CLEAN)},
    image_text_arms={"noisy": ("clip", "sogclr", "nuclr", "clip-reg", "reg-only", "wpse"), "clean": ("clip",)},
    nuclr_freeze_epochs=CLAIMS_ZETA_FREEZE,
    theory=QUICK.theory,
    seconds_per_run={"two_view": 55.0, "image_text": 50.0, "theory": 180.0},
    require_declared_seeds=True,
)

PRESETS = {preset.name: preset for preset in (TINY, QUICK, TWO_VIEW, FULL, GPU, CLAIMS)}


def arms(preset: Preset) -> list[Arm]:
    """Every arm of the preset's training suites, two-view first, in table order."""
    result = []
    for role, (condition, extra) in preset.two_view_conditions.items():
        for key in preset.two_view_arms.get(role, ()):
            label, overrides = TWO_VIEW_OBJECTIVES[key]
            result.append(
                Arm(
                    "two_view",
                    role,
                    condition,
                    key,
                    label,
                    f"tv-{role.replace('_', '-')}-{key}",
                    preset.two_view_base + extra + overrides,
                )
            )
    for role, (condition, extra) in preset.image_text_conditions.items():
        for key in preset.image_text_arms.get(role, ()):
            label, overrides = IMAGE_TEXT_OBJECTIVES[key]
            if key == "nuclr" and preset.nuclr_epochs_setting:
                overrides = overrides + (f"objective.epochs={_epochs(preset.image_text_base)}",)
            if key == "nuclr":
                overrides = overrides + (f"objective.freeze_epochs={preset.nuclr_freeze_epochs:g}",)
            result.append(
                Arm(
                    "image_text",
                    role,
                    condition,
                    key,
                    label,
                    f"it-{role.replace('_', '-')}-{key}",
                    preset.image_text_base + extra + overrides,
                )
            )
    return result


def plan_runs(preset: Preset, suites: tuple[str, ...] = SUITES) -> list[RunSpec]:
    """One :class:`RunSpec` per arm and seed of the chosen training suites (seed-major within each arm)."""
    return [RunSpec(arm, seed) for arm in arms(preset) if arm.suite in suites for seed in arm_seeds(preset, arm)]


def arm_seeds(preset: Preset, arm: Arm) -> tuple[int, ...]:
    """The seeds ``arm`` runs on: the preset's, cut to its suite's count, and to ``other_arm_seeds`` for an arm
    that only fills the results table (seeds are spent where the verdicts need them)."""
    seeds = preset.seeds[: preset.suite_seeds.get(arm.suite, len(preset.seeds))]
    read = (arm.suite, arm.role, arm.objective_key) in CLAIM_ARMS or DEFAULT_RUNS.get(arm.suite) == (
        arm.role,
        arm.objective_key,
    )
    return seeds if read or not preset.other_arm_seeds else seeds[: preset.other_arm_seeds]


def _epochs(base: tuple[str, ...]) -> float:
    values = [item.split("=", 1)[1] for item in base if item.startswith("epochs=")]
    if values:
        return float(values[-1])
    return 3.0  # the fashion-captions preset's


def seed_shortfalls(preset: Preset, suites: tuple[str, ...] = SUITES) -> list[str]:
    """One sentence per claim whose arms all run under ``preset`` but some on fewer seeds than the claim declares
    in the registry (a claim whose arms do not all run is not measured, not short of seeds)."""
    planned: dict[tuple[str, str, str], int] = {}
    for spec in plan_runs(preset, suites):
        arm = (spec.suite, spec.arm.role, spec.arm.objective_key)
        planned[arm] = planned.get(arm, 0) + 1
    shortfalls = []
    for claim in REGISTRY:
        arms = {arm for arm in claim.arms() if arm[0] in suites}
        if not arms or not arms <= set(planned):
            continue
        fewest = min(planned[arm] for arm in arms)
        if fewest < claim.seeds:
            shortfalls.append(
                f"preset {preset.name}: the claim '{claim.title}' declares {claim.seeds} seeds, its arms run on "
                f"{fewest}; its verdict will be less powered than declared"
            )
    return shortfalls
