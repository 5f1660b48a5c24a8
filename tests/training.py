"""What the training tests share: a small, fast configuration and the weights a run ends with."""

from pathlib import Path

import torch
from safetensors.torch import load_file

from uncurated.train.checkpoint import latest_checkpoint

# Small and fast: digits, an MLP without batch norm, no augmentation noise in the comparisons.
SMOKE = ["preset=digits", "progress=false", "log_every=1", "probe_train_size=0"]


def overrides(tmp_path: Path, *extra: str) -> list[str]:
    return [*SMOKE, f"out={tmp_path}", *extra]


def final_weights(run_dir: Path) -> dict[str, torch.Tensor]:
    return load_file(latest_checkpoint(run_dir / "checkpoints") / "model.safetensors")

