"""Write the whole weights of a run's latest checkpoint as one ``model.safetensors``, for evaluation elsewhere and
for sharing; for a ``parallel=fsdp`` run, whose checkpoints hold each process's shards (``sharded/``)::

    python scripts/export_weights.py runs/NAME                       # writes runs/NAME/model.safetensors
    python scripts/export_weights.py runs/NAME --out exported.safetensors

The checkpoint is verified against its manifest first; the shards are read in this one process (DCP reshards them
into whole tensors), so the whole model must fit its memory. A checkpoint whose weights are already
``model.safetensors`` is copied tensor by tensor. ``uncurated eval`` needs no export: it reads the shards itself.
"""

from __future__ import annotations

import argparse
import sys
from pathlib import Path

from safetensors.torch import load_file, save_file

from uncurated.train.checkpoint import (
    WEIGHTS,
    checkpoint_run,
    latest_checkpoint,
    read_manifest,
    sharded_weights,
    verify_checkpoint,
)
from uncurated.train.parallel import read_whole_weights


def export(run: Path, out: Path) -> Path:
    """Export the latest checkpoint of the run folder ``run`` to ``out``; return the checkpoint it read."""
    checkpoint = latest_checkpoint(run / "checkpoints")
    if checkpoint is None:
        raise FileNotFoundError(f"{run} has no checkpoint")
    verify_checkpoint(checkpoint)
    shards = sharded_weights(checkpoint)
    weights = load_file(checkpoint / WEIGHTS) if shards is None else read_whole_weights(shards)
    identity = {"run": str(checkpoint_run(checkpoint)), "step": str(read_manifest(checkpoint)["step"])}
    save_file({name: tensor.contiguous() for name, tensor in weights.items()}, out, metadata=identity)
    return checkpoint


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("run", type=Path, help="the run folder (runs/NAME)")
    parser.add_argument("--out", type=Path, help="the file to write (default: RUN/model.safetensors)")
    args = parser.parse_args(argv)
    out = args.out or args.run / WEIGHTS
    checkpoint = export(args.run, out)
    print(f"wrote the weights of {checkpoint} to {out}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
