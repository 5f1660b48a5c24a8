"""``uncurated ARGUMENTS`` under torchrun, each process recording the largest tensor it holds while it writes a
checkpoint: the largest piece of the model or optimizer state handed to the writer, by its local size (a shard's)
and its whole size, written as JSON to ``$SAVE_PROBE_DIR/rank{R}.json``.

``SAVE_PROBE_PLANT_FULL=1`` plants the path checkpoints took before shards: the whole model and optimizer state
gathered (``full_state_dict=True``), recorded the same way, so that the test sees its probe catch it.
"""

import json
import os
import runpy
import sys
from pathlib import Path

import torch
from torch.distributed.tensor import DTensor

from uncurated.train import parallel, trainer

largest = {"local": 0, "whole": 0, "saves": 0}


def _record(tree) -> None:
    if isinstance(tree, dict):
        for value in tree.values():
            _record(value)
    elif isinstance(tree, list | tuple):
        for value in tree:
            _record(value)
    elif isinstance(tree, torch.Tensor):
        local = tree.to_local() if isinstance(tree, DTensor) else tree
        largest["local"] = max(largest["local"], local.numel())
        largest["whole"] = max(largest["whole"], tree.numel())


real_sharded_state = trainer.sharded_state


def probed_sharded_state(model, modules, optimizer):
    if os.environ.get("SAVE_PROBE_PLANT_FULL") == "1":  # the old path: the whole state, gathered
        _record(parallel.whole_model_state(model, True))
        _record(parallel.whole_optimizer_state(modules, optimizer, True))
    tensors, rest = real_sharded_state(model, modules, optimizer)
    _record(tensors)
    largest["saves"] += 1
    folder = Path(os.environ["SAVE_PROBE_DIR"])
    largest["parameter"] = max(p.numel() for p in model.parameters())  # a DTensor's numel is the whole's
    (folder / f"rank{os.environ['RANK']}.json").write_text(json.dumps(largest))
    return tensors, rest


trainer.sharded_state = probed_sharded_state
sys.argv = ["uncurated", *sys.argv[1:]]
runpy.run_module("uncurated", run_name="__main__", alter_sys=True)
