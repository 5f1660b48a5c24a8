"""The sections of the training configuration, each owning its keys: a key's default, meaning, range or choices
and whether a resumed run may change it are declared once, on its field (:func:`.setting.setting`), and checked
when the section is built. :class:`~uncurated.train.config.TrainConfig` is every section at once, its keys flat
(``batch_size=64``, as the command line, the presets and a saved ``config.yaml`` write them). Imports nothing of
torch: ``uncurated train --help`` prints the sections from here.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any, ClassVar

from .. import data_defaults
from .. import model_defaults as defaults
from . import builtin_formats  # noqa: F401  (registers the package's data formats)
from .data_formats import format_names
from .image_encoders import image_encoder_names
from .setting import ConfigError, Section, setting
from .text_encoders import text_encoder_names
from .trackers import tracker_names

#: The preset of a run that names none: two views of Fashion-MNIST in clutter, where training beats its baselines.
DEFAULT_PRESET = "fashion-clutter"
#: ``pipeline``: two augmented views of an image, or an image and its caption.
PIPELINES = ("two_view", "image_text")
#: ``positives``: two views of one image, or two images of one label (:mod:`uncurated.train.supervision`).
POSITIVES = ("augmentation", "label")
#: ``precision``: bf16 autocast of the encoders, ``auto`` (bf16 on CUDA, none on the CPU), or none.
PRECISIONS = ("auto", "bf16", "fp32")
#: ``parallel``: how the towers are spread over the training processes; ``fsdp_mixed_precision``: FSDP2's
#: mixed-precision policy of the towers (:mod:`uncurated.train.parallel`).
PARALLEL_MODES = ("ddp", "fsdp")
FSDP_MIXED_PRECISIONS = ("none", "bf16", "bf16_reduce_fp32")
#: ``compile``: ``true`` or ``false`` sets the objective's ``compile`` (unless ``objective.compile`` does);
#: ``auto`` leaves the objective's default (compiled on CUDA where Triton is installed, not on the CPU).
COMPILE_CHOICES = ("auto", "true", "false")


def _two_kernel_weights(alphas: list[float]) -> None:
    if len(alphas) != 2 or not any(alphas):
        raise ConfigError(f"wpse_kernel_weights must be [alpha1, alpha2], not both 0, got {alphas!r}")


def _trackers(report_to: str) -> None:
    try:
        tracker_names(report_to)
    except ValueError as error:
        raise ConfigError(str(error)) from error


@dataclass
class RunSection(Section):
    """The run: its name and folder, its seed and device, whether it resumes."""

    title: ClassVar[str] = "run"

    preset: str = setting(
        DEFAULT_PRESET,
        "the preset read first: a name of src/uncurated/configs or a YAML file",
        resumable=True,
    )
    name: str = setting(
        "",
        "the run's folder under out ('': DATASET-OBJECTIVE-seedN, the preset's name for its own dataset)",
        resumable=True,
    )
    out: str = setting("runs", "the folder that holds the runs", resumable=True)
    seed: int = setting(0, "the seed of the weights, the data order and the augmentations", low=0)
    device: str = setting("auto", "auto (a GPU where there is one), cpu, cuda, cuda:N, mps", resumable=True)
    resume: bool = setting(
        False,
        "continue the run in out/name from its config.yaml and checkpoint, or start it where it has none "
        "(latest, auto: the same; auto for torchrun --max-restarts)",
        resumable=True,
    )
    progress: bool = setting(
        True,
        "show a progress bar (plain lines when the output is not a terminal)",
        resumable=True,
    )


@dataclass
class DataSection(Section):
    """The training data: its format and folder, the views or captions, the noise added, how it is read."""

    title: ClassVar[str] = "data"

    pipeline: str = setting(
        "two_view",
        "two_view: two augmented views of an image; image_text: an image and its caption",
        choices=PIPELINES,
    )
    dataset: str = setting(
        "fashion-mnist",
        "the training data, a registered format (a dataset other than the preset's takes its own data defaults)",
        choices=format_names,
    )
    dataset_config: dict[str, Any] = setting(
        {}, "a registered format's own keys, dataset.NAME=VALUE (the package's formats take none)"
    )
    data_dir: str = setting("", "where the dataset is: a folder, a CSV file or shards-{000..099}.tar", resumable=True)
    augment: str = setting("fashion-mnist", "the augmentation preset of the views", choices=data_defaults.AUGMENTATIONS)
    noise_eta: float = setting(
        0.0,
        "the probability of the thesis' extra crop to a fifth of the area (noisy views)",
        low=0.0,
        high=1.0,
    )
    positives: str = setting(
        "augmentation",
        "two views: augmentation (two views of one image) or label (two images of one label)",
        choices=POSITIVES,
    )
    label_noise: float = setting(
        0.0,
        "positives=label: flip a training label to a related class with probability eta / 2",
        low=0.0,
        high=1.0,
    )
    oracle_negatives: bool = setting(False, "pass the batch's labels to the objective (the supervised oracle)")
    mismatch_fraction: float = setting(
        0.0,
        "fashion-captions: the fraction of pairs whose caption is another image's",
        low=0.0,
        high=1.0,
    )
    mismatch_mode: str = setting(
        "uniform",
        "fashion-captions: whose caption a mismatched pair gets",
        choices=data_defaults.MISMATCH_MODES,
    )
    imbalance_ratio: float = setting(
        1.0,
        "fashion-captions: the most common class over the rarest (a long tail)",
        low=1.0,
    )
    duplicate_fraction: float = setting(0.0, "fashion-captions: the fraction of pairs repeated", low=0.0, high=1.0)
    spurious_correlation: float = setting(
        0.95,
        "fashion-spurious: how often the background goes with the class in training",
        low=0.0,
        high=1.0,
    )
    csv_img_key: str = setting("filepath", "csv: the column of the image paths")
    csv_caption_key: str = setting("title", "csv: the column of the captions")
    csv_separator: str = setting("\t", "csv: the column separator (a tab by default, as open_clip's)")
    image_size: int = setting(
        0,
        "the side images are resized to (0: each image's own, or an hf: backbone's input size)",
        low=0,
    )
    image_mode: str = setting("RGB", "RGB or L (gray) decoding of image files", choices=data_defaults.IMAGE_MODES)
    image_resize: str = setting(
        "auto",
        "stretch or crop (the shorter side, then the centre); auto: crop for hf:/python: encoders",
        choices=("auto", *data_defaults.RESIZES),
    )
    num_workers: int = setting(
        0,
        "DataLoader processes decoding files (0: decode in the training process)",
        low=0,
        resumable=True,
    )
    data_on_device: bool = setting(
        False,
        "hold in-memory training data on the training device (a GPU): no copy per batch",
    )
    samples_per_shard: int = setting(10000, "webdataset: the samples in a shard (to count an epoch)", low=1)
    shard_reader: str = setting(
        "tarfile",
        "webdataset: tarfile (strict headers) or webdataset (the library's iterator)",
        choices=data_defaults.SHARD_READERS,
        resumable=True,
    )
    shard_shuffle: bool = setting(True, "webdataset: a new shard order each epoch, from the seed and the epoch")
    shuffle_buffer: int = setting(
        1000,
        "webdataset: samples shuffled through a buffer of this many per reader (0: none)",
        low=0,
    )
    resample_shards: bool = setting(
        False,
        "webdataset: draw shards with replacement, without end (open_clip's resampling)",
    )
    steps_per_epoch: int = setting(0, "the steps of an epoch of streamed data (0: one pass over the data)", low=0)
    train_subset: int = setting(0, "train on a seeded random subset of this many in-memory samples (0: all)", low=0)
    max_skipped_fraction: float = setting(
        0.01,
        "the fraction of unreadable items above which the run stops",
        low=0.0,
        high=1.0,
        resumable=True,
    )


@dataclass
class ModelSection(Section):
    """The towers: the image and text encoders, the projection heads, WPSE's point sets."""

    title: ClassVar[str] = "model"

    image_encoder: str = setting(
        "resnet",
        "resnet, mlp, hf:ARCHITECTURE, hf:FOLDER or python:module:function",
        encoders=image_encoder_names,
    )
    image_encoder_config: dict[str, Any] = setting(
        {},
        "a registered encoder's own keys, an hf: model's configuration fields or a python: factory's arguments",
    )
    image_pooling: str = setting(
        "auto",
        "hf: image encoders: how the tokens become one vector",
        choices=defaults.HF_POOLINGS,
    )
    widths: list[int] = setting(
        list(defaults.RESNET_WIDTHS),
        "the channels of the ResNet's stages, or the MLP's layer widths",
        low=1,
    )
    blocks: list[int] = setting(list(defaults.RESNET_BLOCKS), "the residual blocks of each ResNet stage", low=1)
    pool: str = setting(
        defaults.RESNET_POOL,
        "how the ResNet pools its last feature map (grid: a 2 x 2 grid of averages)",
        choices=defaults.RESNET_POOLINGS,
    )
    norm: str = setting("batch", "the MLP encoder's normalization (batch or none)", choices=defaults.NORMS)
    projection_norm: str = setting(
        "auto",
        "the projection head's normalization; auto: norm's",
        choices=("auto", *defaults.NORMS),
    )
    projection_dim: int = setting(defaults.PROJECTION_DIM, "the width of the embeddings the objective compares", low=1)
    projection_layers: int = setting(
        defaults.PROJECTION_LAYERS,
        "the projection head's layers (1: linear; 2: Linear-ReLU-Linear)",
        low=1,
        high=2,
    )
    text_encoder: str = setting(
        "transformer",
        "transformer, minilm (frozen), hf:ARCHITECTURE, hf:FOLDER or python:module:function",
        encoders=text_encoder_names,
    )
    text_encoder_config: dict[str, Any] = setting(
        {},
        "a registered encoder's own keys, an hf: model's configuration fields or a python: factory's arguments",
    )
    text_pooling: str = setting(
        "auto",
        "hf: text encoders: how the tokens become one vector",
        choices=defaults.HF_POOLINGS,
    )
    vocab_size: int = setting(30522, "the tokens of the subword tokenizer trained on the captions", low=16)
    text_width: int = setting(defaults.TEXT_WIDTH, "the text transformer's width", low=1)
    text_layers: int = setting(defaults.TEXT_LAYERS, "the text transformer's layers", low=1)
    text_heads: int = setting(defaults.TEXT_HEADS, "the text transformer's attention heads", low=1)
    max_caption_length: int = setting(24, "captions are cut to this many tokens", low=1)
    point_sets: bool = setting(False, "train WPSE: every image cell and caption token a weighted point")
    wpse_points: str = setting(
        "tokens",
        "WPSE: tokens, or pooled (each side's pooled features the only point)",
        choices=defaults.POINTS,
    )
    wpse_image_positions: bool = setting(True, "WPSE: a learned embedding per image token position")
    wpse_weights: str = setting(
        defaults.WEIGHT_ACTIVATION,
        "WPSE: the points' weights: tanh, sigmoid (the positive-weight ablation) or ones",
        choices=defaults.WEIGHT_ACTIVATIONS,
    )
    wpse_kernel: str = setting(
        defaults.NONLINEAR_KERNEL,
        "WPSE: the nonlinear kernel",
        choices=defaults.NONLINEAR_KERNEL_NAMES,
    )
    wpse_kernel_scale: float = setting(
        defaults.KERNEL_SCALE,
        "WPSE: the nonlinear kernel's sigma (gaussian) or c (imq)",
        low=0.0,
        open_below=True,
    )
    wpse_kernel_weights: list[float] = setting(
        list(defaults.KERNEL_WEIGHTS),
        "WPSE: [alpha1, alpha2], the weights of the linear and the nonlinear kernel",
        low=0.0,
        check=_two_kernel_weights,
    )
    wpse_features: int = setting(
        defaults.WPSE_TRAIN_FEATURES,
        "WPSE: random features in training, redrawn every batch",
        low=1,
    )
    wpse_eval_features: int = setting(
        defaults.WPSE_EVAL_FEATURES,
        "WPSE: random features in evaluation, one stored draw",
        low=1,
    )
    wpse_pooling: str = setting(
        defaults.WPSE_POOLING,
        "WPSE: mean (the official code) or sum (the paper's Eq. 8) of the points",
        choices=defaults.WPSE_POOLINGS,
    )


@dataclass
class ObjectiveSection(Section):
    """The objective and its parameters (``objective.NAME=VALUE``), checked by the objectives' registry."""

    title: ClassVar[str] = "objective"

    objective: str = setting(
        "dcl",
        "a name of `uncurated objectives`, or clip / simclr (InfoNCE across modalities / two views)",
    )
    objective_params: dict[str, Any] = setting(
        {},
        "the objective's parameters: objective.NAME=VALUE (its paper's values unless set)",
    )


@dataclass
class OptimizationSection(Section):
    """The optimizer, its schedule, the batch and the arithmetic of a step."""

    title: ClassVar[str] = "optimization"

    epochs: float = setting(5.0, "passes over the training data (may be fractional)", low=0.0, open_below=True)
    batch_size: int = setting(256, "the global batch (shared by the processes under torchrun)", low=2)
    micro_batch_size: int = setting(
        0,
        "embed in micro-batches of this size, exact gradients (0: off)",
        low=0,
        resumable=True,
    )
    lr: float = setting(1e-3, "AdamW's peak learning rate, after warmup, then cosine decay", low=0.0)
    projection_lr: float = setting(0.0, "the projection heads' learning rate (0: lr)", low=0.0)
    weight_decay: float = setting(1e-6, "AdamW's decoupled weight decay", low=0.0)
    warmup_epochs: float = setting(0.5, "the linear warmup of the learning rate, in epochs", low=0.0)
    grad_clip: float = setting(0.0, "clip the gradient's norm to this (0: off)", low=0.0)
    max_nonfinite_steps: int = setting(
        5,
        "consecutive steps with a non-finite loss skipped before the run stops",
        low=0,
        resumable=True,
    )
    precision: str = setting(
        "auto",
        "bf16 or fp32 autocast of the encoders; auto: bf16 on CUDA (not under fsdp_mixed_precision), fp32",
        choices=PRECISIONS,
    )
    compile: str = setting(
        "auto",
        "torch.compile of the objective's tiles; auto: on CUDA where it compiles",
        choices=COMPILE_CHOICES,
        resumable=True,
    )
    gradient_checkpointing: bool = setting(
        False,
        "hf: encoders recompute activations in the backward pass",
        resumable=True,
    )


@dataclass
class DistributedSection(Section):
    """How the processes under torchrun share the model and wait for each other."""

    title: ClassVar[str] = "distributed"

    dist_timeout: float = setting(
        600.0,
        "seconds a collective operation waits under torchrun before the run stops",
        low=0.0,
        open_below=True,
        resumable=True,
    )
    parallel: str = setting(
        "ddp",
        "under torchrun: ddp (DistributedDataParallel) or fsdp (FSDP2 shards the towers)",
        choices=PARALLEL_MODES,
    )
    # A resume may change the policy: its rounding changes, not what is trained, the checkpoints float32 under each.
    fsdp_mixed_precision: str = setting(
        "none",
        "parallel=fsdp: bf16 all-gathers and reductions (bf16_reduce_fp32: float32 reductions)",
        choices=FSDP_MIXED_PRECISIONS,
        resumable=True,
    )
    sync_batch_norm: bool = setting(False, "under torchrun on CUDA: batch-norm statistics over the global batch")


@dataclass
class CheckpointSection(Section):
    """Checkpoints and logs."""

    title: ClassVar[str] = "checkpoints"

    checkpoint_every: int = setting(0, "also write a checkpoint every this many steps (0: off)", low=0, resumable=True)
    checkpoint_minutes: float = setting(
        0.0,
        "also write one when this many minutes passed since the last (0: off)",
        low=0.0,
        resumable=True,
    )
    checkpoint_each_epoch: bool = setting(
        True,
        "write one at the end of every epoch (always one at the end of the run)",
        resumable=True,
    )
    checkpoint_async: bool = setting(
        False,
        "write those written as the run trains in background threads, from a copy (parallel=fsdp: DCP's async_save)",
        resumable=True,
    )
    keep_checkpoints: int = setting(2, "the checkpoints kept (the latest ones)", low=1, resumable=True)
    log_every: int = setting(20, "log the loss to metrics.csv every this many steps", low=1, resumable=True)
    report_to: str = setting(
        "none",
        "where the rows of metrics.csv also go: none, or tensorboard and/or wandb (offline), comma-separated",
        resumable=True,
        check=_trackers,
    )


@dataclass
class EvaluationSection(Section):
    """The evaluation at the end of the run (and every ``eval_every`` epochs)."""

    title: ClassVar[str] = "evaluation"

    eval_every: int = setting(
        0,
        "also evaluate every this many epochs, into metrics.csv and report.json (0: at the end only)",
        low=0,
        resumable=True,
    )
    probe_train_size: int = setting(
        20000,
        "the training images the linear probe learns from (0: all of them)",
        low=0,
        resumable=True,
    )
    probe_layer: str = setting(
        "encoder",
        "the features the probes read: the encoder's pooled ones, or every stage's",
        choices=defaults.FEATURE_LAYERS,
        resumable=True,
    )
    probe_baselines: bool = setting(
        True,
        "also probe raw pixels and an untrained model (what training added)",
        resumable=True,
    )
    zero_shot_dir: str = setting(
        "",
        "image-text: zero-shot accuracy on this image folder (one subfolder per class)",
        resumable=True,
    )
    zero_shot_classes: str = setting(
        "",
        "its class names: imagenet1k, cifar10, cifar100 or FILE ('': the folder names)",
        resumable=True,
    )
    zero_shot_templates: str = setting("imagenet1k", "its prompt templates: imagenet1k, cifar or FILE", resumable=True)
    retrieval_file: str = setting(
        "",
        "image-text: retrieval recall on Karpathy's dataset_*.json (test split) or a CSV",
        resumable=True,
    )
    retrieval_images: str = setting(
        "",
        "the folder its image paths are relative to ('': the file's folder)",
        resumable=True,
    )
