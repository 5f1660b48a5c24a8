"""Convert checkpoints of the first format (a pickled ``state.pt``) to the current one, for trusted folders only.

uncurated refuses checkpoint folders that hold ``state.pt``: unpickling a file
can run any code its author chose. This script converts such a folder in
place, once, for a user who trusts whoever wrote it (typically: they trained
it themselves with an older uncurated)::

    python scripts/convert_checkpoint.py --trusted runs/NAME            # every checkpoint of a run
    python scripts/convert_checkpoint.py --trusted runs/NAME/checkpoints/step-00000100

It still does not unpickle arbitrary objects: ``state.pt`` is read with
``torch.load(weights_only=True)`` and an allowlist of exactly what the first
format holds besides plain values (NumPy's generator key, an array; an epoch's
skipped-item counts, a ``SkipCounts`` with its ``Skip`` examples). The files
are first checked against the folder's manifest when it has one. The state is
then written as ``state.safetensors`` (see ``uncurated.train.state_codec``)
with a manifest of the current format, and ``state.pt`` is removed last, so a
conversion cut short is simply run again.
"""

from __future__ import annotations

import argparse
import hashlib
import json
import pickle
import sys
from pathlib import Path

import numpy as np
import torch

from uncurated.data import SkipCounts
from uncurated.data.skip import Skip
from uncurated.train import random_state
from uncurated.train.checkpoint import FORMAT, LEGACY_STATE, MANIFEST, PREFIX, STATE, WEIGHTS, verify_checkpoint
from uncurated.train.state_codec import save_state

_RECONSTRUCT = np.zeros(1).__reduce__()[0]  # NumPy's array rebuilder, wherever this NumPy keeps it
#: What a first-format state.pt may hold besides tensors and plain values, under NumPy 1's and 2's names.
ALLOWED = [
    (_RECONSTRUCT, "numpy.core.multiarray._reconstruct"),
    (_RECONSTRUCT, "numpy._core.multiarray._reconstruct"),
    np.ndarray,
    np.dtype,
    type(np.dtype(np.uint32)),
    SkipCounts,
    Skip,
]


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("folders", nargs="+", type=Path, metavar="FOLDER", help="a run folder or a checkpoint folder")
    parser.add_argument("--trusted", action="store_true", help="required: you trust whoever wrote the folders")
    args = parser.parse_args(argv)
    if not args.trusted:
        parser.error("give --trusted to confirm that you trust whoever wrote the folders (see --help)")
    for folder in args.folders:
        run = folder / "checkpoints"
        for checkpoint in sorted(run.glob(f"{PREFIX}*")) if run.is_dir() else [folder]:
            if not (checkpoint / LEGACY_STATE).is_file():
                print(f"{checkpoint}: no {LEGACY_STATE}, nothing to convert")
                continue
            try:
                convert(checkpoint)
            except (OSError, ValueError, KeyError, TypeError, RuntimeError, pickle.UnpicklingError) as error:
                parser.exit(1, f"{parser.prog}: {checkpoint}: not converted: {error}\n")
            print(f"{checkpoint}: converted")
    return 0


def convert(folder: Path) -> None:
    """Rewrite the first-format checkpoint ``folder`` in the current format (see the module)."""
    manifest = json.loads((folder / MANIFEST).read_text()) if (folder / MANIFEST).is_file() else {}
    for name, expected in manifest.get("files", {}).items():
        if describe(folder / name) != expected:
            raise ValueError(f"{name} does not match its manifest: the folder is damaged")
    with torch.serialization.safe_globals(ALLOWED):
        old = torch.load(folder / LEGACY_STATE, map_location="cpu", weights_only=True)
    rng, skips = old.pop("rng"), old.pop("epoch_skips", None)
    state = {
        **old,
        "nonfinite": old.get("nonfinite", {"total": 0, "in_a_row": 0}),
        "ranks": [  # the first format saved the main process's generators and counts only
            {
                "rng": {
                    **rng,
                    "numpy": random_state.numpy_fields(rng["numpy"]),
                    "python": random_state.python_fields(rng["python"]),
                },
                "epoch_skips": None if skips is None else skips.state_dict(),
            }
        ],
    }
    save_state(state, folder / STATE)
    step = manifest.get("step", int(folder.name.removeprefix(PREFIX)))
    files = {name: describe(folder / name) for name in (WEIGHTS, STATE)}
    temporary = folder / f".{MANIFEST}.converting"
    temporary.write_text(
        json.dumps({"format": FORMAT, "step": step, "files": files, "metadata": manifest.get("metadata", {})}, indent=1)
    )
    temporary.replace(folder / MANIFEST)
    (folder / LEGACY_STATE).unlink()
    verify_checkpoint(folder)


def describe(path: Path) -> dict:
    """The size and SHA-256 of ``path``, as a manifest records them."""
    return {"bytes": path.stat().st_size, "sha256": hashlib.sha256(path.read_bytes()).hexdigest()}


if __name__ == "__main__":
    sys.exit(main())
