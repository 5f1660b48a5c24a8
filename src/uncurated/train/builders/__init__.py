"""From a checked configuration to the parts of a run: the datasets and their augmentation (:mod:`.datasets`), the
towers (:mod:`.models`) and the objective (:mod:`.objective`), held together as :class:`.parts.TrainingParts`."""

from __future__ import annotations

from ..image_decoding import image_resize, image_size
from .datasets import Splits, build_augmentation, build_splits, dataset_size, first_sample, training_data_facts
from .models import TOKENIZER_FILE, build_model, save_run_tokenizer, trains_tokenizer
from .objective import build_objective
from .parts import TrainingParts

__all__ = [
    "TOKENIZER_FILE",
    "Splits",
    "TrainingParts",
    "build_augmentation",
    "build_model",
    "build_objective",
    "build_splits",
    "dataset_size",
    "first_sample",
    "image_resize",
    "image_size",
    "save_run_tokenizer",
    "training_data_facts",
    "trains_tokenizer",
]
