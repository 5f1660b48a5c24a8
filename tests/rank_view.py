"""``uncurated ARGUMENTS`` under torchrun with one process's view of the file system changed, for the tests of a run
folder the processes do not share and of a checkpoint write that fails on one process.

The environment names what to change on process ``RANK_VIEW_RANK`` (default 1):

* ``RANK_VIEW_CWD``: it starts in this folder instead, so a relative ``out=`` names another folder there (another
  node that does not mount the run folder);
* ``RANK_VIEW_LOST_STAGING=STEP``: its objective file of the checkpoint of step ``STEP`` goes into a folder that does
  not exist (it cannot see the main process's temporary folder), which safetensors reports as a ``SafetensorError``;
* ``RANK_VIEW_FULL_SHARDS=STEP``: under ``parallel=fsdp``, its write of the model's shards of the checkpoint of step
  ``STEP`` (DCP's file of this process) fails with ``ENOSPC``, as on a full disk, after DCP has planned the save with
  every process.
* ``RANK_VIEW_NAN_IMAGES=STEP,STEP,...``: its images of those steps are NaN (a corrupt input on one process only:
  its embeddings are not finite, the other processes' are);
* ``RANK_VIEW_NAN_LOSS=STEP,STEP,...``: its loss of those steps is NaN (its share only; the other processes' are
  finite);
* ``RANK_VIEW_KILL_AT_STEP=STEP``: on torchrun's first attempt (``TORCHELASTIC_RESTART_COUNT`` 0), it kills itself
  (SIGKILL) as it starts step ``STEP``, as a node lost mid-run; a restart (``--max-restarts``) runs on.
"""

import os
import runpy
import sys
from pathlib import Path

sys.path[:] = [os.path.abspath(entry) for entry in sys.path]  # the imports still resolve after a chdir
if os.environ["RANK"] == os.environ.get("RANK_VIEW_RANK", "1"):
    if "RANK_VIEW_CWD" in os.environ:
        os.chdir(os.environ["RANK_VIEW_CWD"])
    if "RANK_VIEW_LOST_STAGING" in os.environ:
        from uncurated.train import trainer

        real_write = trainer.write_objective_state

        def write_elsewhere(staging, *args, **kwargs):
            lost = Path(staging).name.startswith(f".step-{int(os.environ['RANK_VIEW_LOST_STAGING']):08d}-")
            return real_write(Path(staging) / "not-here" if lost else staging, *args, **kwargs)

        trainer.write_objective_state = write_elsewhere
    if "RANK_VIEW_FULL_SHARDS" in os.environ:
        import errno

        import torch.distributed.checkpoint as dcp

        class FullDiskWriter(dcp.FileSystemWriter):
            def write_data(self, plan, planner):
                step = f"/.step-{int(os.environ['RANK_VIEW_FULL_SHARDS']):08d}-"
                if step in str(self.path):
                    raise OSError(errno.ENOSPC, "No space left on device (planted)", str(self.path))
                return super().write_data(plan, planner)

        dcp.FileSystemWriter = FullDiskWriter
    if "RANK_VIEW_NAN_IMAGES" in os.environ or "RANK_VIEW_NAN_LOSS" in os.environ:
        import math

        from uncurated.train import trainer

        def steps(variable: str) -> set[int]:
            return {int(step) for step in os.environ.get(variable, "").split(",") if step}

        nan_images, nan_loss = steps("RANK_VIEW_NAN_IMAGES"), steps("RANK_VIEW_NAN_LOSS")
        real_embed, real_loss = trainer.Trainer._embed, trainer.Trainer._loss

        def embed_nan(self, batch):
            poisoned = self.position.step in nan_images
            return real_embed(self, {**batch, "image": batch["image"] * math.nan} if poisoned else batch)

        def loss_nan(self, *args):
            return real_loss(self, *args) * (math.nan if self.position.step in nan_loss else 1.0)

        trainer.Trainer._embed, trainer.Trainer._loss = embed_nan, loss_nan
    if "RANK_VIEW_KILL_AT_STEP" in os.environ and os.environ.get("TORCHELASTIC_RESTART_COUNT", "0") == "0":
        import signal

        from uncurated.train import trainer

        real_step = trainer.Trainer.step

        def step_or_die(self, batch):
            if self.position.step == int(os.environ["RANK_VIEW_KILL_AT_STEP"]):
                os.kill(os.getpid(), signal.SIGKILL)
            return real_step(self, batch)

        trainer.Trainer.step = step_or_die
sys.argv = ["uncurated", *sys.argv[1:]]
runpy.run_module("uncurated", run_name="__main__", alter_sys=True)
