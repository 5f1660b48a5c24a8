"""The distributed tests' launchers fail a hung run within their timeout, naming each rank and the collective it
waited in (``launch.py``)."""

import textwrap
import time

import pytest
import torch
import torch.distributed as dist
from launch import join_gloo, spawn, torchrun, where

# Rank 0 waits in an all-reduce that rank 1, asleep, never joins (the default process-group timeout, 30 minutes).
STUCK = textwrap.dedent(
    """
    import time

    import torch
    import torch.distributed as dist

    dist.init_process_group("gloo")
    if dist.get_rank() == 0:
        dist.all_reduce(torch.ones(1))
    time.sleep(600)
    """
)


def test_a_hung_torchrun_fails_naming_each_rank_and_the_collective(tmp_path):
    script = tmp_path / "stuck.py"
    script.write_text(STUCK)
    with pytest.raises(pytest.fail.Exception) as failed:
        torchrun(str(script), timeout=15)
    report = str(failed.value)
    assert f"torchrun {script} did not finish within 15 s" in report, report
    assert "rank 0: waiting in the collective all_reduce" in report and f"<module> at {script}:9" in report, report
    assert f"rank 1: in no collective: in <module> at {script}:10" in report, report


def _stuck_worker(rank: int, world: int, init_file: str) -> None:
    join_gloo(rank, world, init_file)
    if rank == 0:
        dist.broadcast(torch.ones(1), src=1)
    time.sleep(600)


def test_a_hung_spawn_fails_naming_each_rank_and_the_collective(tmp_path):
    with pytest.raises(pytest.fail.Exception) as failed:
        spawn(_stuck_worker, 2, str(tmp_path / "init"), timeout=10)
    report = str(failed.value)
    assert "spawn _stuck_worker did not finish within 10 s" in report, report
    assert "rank 0: waiting in the collective broadcast" in report and "_stuck_worker at" in report, report
    assert "rank 1: in no collective: in _stuck_worker at" in report, report


def test_where_reads_a_faulthandler_dump():
    dump = textwrap.dedent(
        """
        Fatal Python error: Aborted

        Thread 0x00007f26937fe6c0 (most recent call first):
          File "/usr/lib/python3.11/threading.py", line 331 in wait
          File "/usr/lib/python3.11/threading.py", line 1002 in _bootstrap

        Current thread 0x00007f26937ffb80 (most recent call first):
          File "/venv/site-packages/torch/distributed/distributed_c10d.py", line 3252 in all_reduce
          File "/venv/site-packages/torch/distributed/c10d_logger.py", line 83 in wrapper
          File "/src/uncurated/train/distributed.py", line 137 in _collective
          File "/src/uncurated/train/distributed.py", line 80 in average
          File "/src/uncurated/train/trainer.py", line 414 in _everywhere
          File "/src/uncurated/train/trainer.py", line 328 in fit

        Extension modules: torch._C (total: 1)
        """
    )
    assert where(dump) == (
        "waiting in the collective all_reduce (all_reduce at /venv/site-packages/torch/distributed/"
        "distributed_c10d.py:3252), called from _collective at /src/uncurated/train/distributed.py:137 <- average "
        "at /src/uncurated/train/distributed.py:80 <- _everywhere at /src/uncurated/train/trainer.py:414"
    )
    assert where("") == "no Python stack was written (the process had exited or could not be signalled)"
