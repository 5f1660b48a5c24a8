"""One agreement per training step under a process group (``process.shard.agree_on_step``), the shard the objective
then reuses, and the per-sample rows written and read without a boolean mask, in three processes (a rank offset
shows at three): the counts and flags of every process, rows held by no write on one process, a bad update
refused on all."""

import math

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
from launch import join_gloo, spawn

from uncurated.process.shard import agree_on_step, agreed_shard, process_shard
from uncurated.state import SampleState

WORLD = 3


def _worker(rank, init_file, results):
    join_gloo(rank, WORLD, init_file)
    try:
        finite = torch.tensor([0.0 if rank == 1 else 1.0, float(rank)])
        shard, sums = agree_on_step(rank + 2, finite)
        found = {"counts": shard.counts, "rank": shard.rank, "sums": sums, "vouched": shard.vouched}
        with agreed_shard(shard):
            found["reused"] = process_shard(rank + 2, None, torch.device("cpu")) is shard
            try:
                process_shard(7, None, torch.device("cpu"))
            except ValueError as error:
                found["mismatch"] = str(error)
        found["after"] = process_shard(rank + 2, None, torch.device("cpu")) is shard
        # 30 rows, 10 per process; the 9 pairs of a step fall in the first 20: process 2 holds none of them.
        state = SampleState({"a": 30}, {"zeta": 0.5}, place=lambda: (rank, WORLD))
        shard, _ = agree_on_step(3, torch.ones(1))
        positions = torch.tensor([[0, 7, 19], [3, 12, 18], [1, 10, 11]][rank])
        values = positions.double() / 10
        state.write_rows([("zeta", "a", positions, values)], shard, refuse_on_device=True)
        found["refused"] = bool(state.refused)
        found["rows"] = state.tensors["zeta", "a"].tolist()
        found["read"] = state.read_rows({"a": torch.arange(30)}, shard)["a"]["zeta"].tolist()
        bad = values.clone()
        if rank == 2:
            bad[1] = math.nan
        state.write_rows([("zeta", "a", positions, bad + 1)], shard, refuse_on_device=True)
        found["refused_bad"] = bool(state.refused)
        found["rows_after_bad"] = state.tensors["zeta", "a"].tolist()
        results[rank] = found
    finally:
        dist.destroy_process_group()


def test_three_processes_agree_on_a_step_and_write_their_rows_without_a_mask(tmp_path):
    with mp.Manager() as manager:
        results = manager.dict()
        spawn(_worker, str(tmp_path / "init"), results, processes=WORLD)
        results = dict(results)
    written = {0: 0.0, 7: 0.7, 19: 1.9, 3: 0.3, 12: 1.2, 18: 1.8, 1: 0.1, 10: 1.0, 11: 1.1}
    every_row = torch.tensor([written.get(position, 0.5) for position in range(30)], dtype=torch.float32).tolist()
    for rank, found in results.items():
        assert found["counts"] == (2, 3, 4) and found["rank"] == rank and found["vouched"]
        assert found["sums"] == [2.0, 3.0]  # two processes' embeddings finite, the ranks summed
        assert found["reused"] and not found["after"]
        assert f"holds {rank + 2} pairs of rank {rank} of 3, the call 7" in found["mismatch"]
        assert not found["refused"]
        assert found["rows"] == every_row[10 * rank : 10 * rank + 10]
        assert found["read"] == every_row
        assert found["refused_bad"], "a NaN written by process 2 is refused on every process"
        assert found["rows_after_bad"] == found["rows"]
