"""`uncurated train` under torchrun: processes sharing each batch train as one process with the whole batch, a run
resumes under another number of processes, and what cannot be shared evenly is refused on every process."""

import pytest
import torch
from training import SMOKE, final_weights, logged_losses, torchrun_train

from uncurated.train import load_config, train
from uncurated.train.checkpoint import FAULT_VARIABLE, latest_checkpoint, read_objective_states

# gloo on CPU; an MLP without batch norm and no augmentation, so every sample's embedding is exact.
EXACT = [*SMOKE, "augment=none", "norm=none", "projection_layers=1", "batch_size=64"]


def assert_same_run(tmp_path, expected: str, got: str) -> None:
    one, other = final_weights(tmp_path / expected), final_weights(tmp_path / got)
    for name in one:
        expected_values, values = one[name], other[name]
        if name.endswith("self_attn.in_proj_bias"):
            # The key bias adds the same number to every score of a query: its gradient is zero but for round-off,
            # which Adam scales up to full steps, so it follows the rounding of each run. Query and value biases.
            third = len(values) // 3
            expected_values, values = (torch.cat([x[:third], x[2 * third :]]) for x in (expected_values, values))
        # float32 weights after AdamW: a parameter whose gradient is nearly zero (an embedding row of a rare token)
        # takes steps of about lr whatever its size, so round-off moves it by up to 1e-5; the losses are held to 1e-5.
        torch.testing.assert_close(values, expected_values, rtol=1e-4, atol=1e-5, msg=name)
    assert logged_losses(tmp_path / got) == pytest.approx(logged_losses(tmp_path / expected), rel=1e-5)


def sample_state(run_dir) -> dict[str, torch.Tensor]:
    """The per-sample state of the run's latest checkpoint, every process's rows put together."""
    states = read_objective_states(latest_checkpoint(run_dir / "checkpoints")).values()
    stores = [state["state._extra_state"] for state in states]
    joined = {}
    for key in stores[0]["tensors"]:
        side = key.split("/")[1]
        joined[key] = torch.cat([store["tensors"][key] for store in sorted(stores, key=lambda s: s["ranges"][side])])
    return joined


@pytest.mark.parametrize("objective", ["simclr", "sogclr"])
def test_two_processes_of_half_the_batch_match_one_process(tmp_path, objective):
    common = [*EXACT, f"out={tmp_path}", "epochs=0.3", f"objective={objective}"]
    train(load_config([*common, "name=one"]))
    torchrun_train(*common, "name=two")
    assert_same_run(tmp_path, "one", "two")


@pytest.mark.slow
@pytest.mark.parametrize("processes", [2, 4])
def test_a_learned_temperature_and_popularities_train_as_in_one_process(tmp_path, processes):
    """CLIP's learned temperature (its gradient averaged by DDP) and NUCLR's state, image-text pairs."""
    from test_train_build import write_image_text_files

    _, csv_path, _ = write_image_text_files(tmp_path / "data")
    common = [
        *EXACT,
        f"out={tmp_path}",
        "dataset=csv",
        f"data_dir={csv_path}",
        "pipeline=image_text",
        "image_mode=L",
        "image_encoder=mlp",
        "probe_layer=encoder",
        "widths=[32]",
        "batch_size=16",
        "epochs=2",
        "text_width=16",
        "text_heads=2",
        "max_skipped_fraction=0.2",
    ]
    for objective in (["objective=clip", "objective.learnable=true"], ["objective=nuclr", "objective.freeze_epochs=0"]):
        name = objective[0].split("=")[1]
        train(load_config([*common, *objective, f"name={name}-one"]))
        torchrun_train(*common, *objective, f"name={name}-many", processes=processes, timeout=300)
        assert_same_run(tmp_path, f"{name}-one", f"{name}-many")


@pytest.mark.parametrize("before, after", [(2, 4), pytest.param(4, 1, marks=pytest.mark.slow)])
def test_a_run_resumes_under_another_number_of_processes(tmp_path, before, after):
    """Killed after its checkpoint of step 8 (inside the write, once published), resumed by ``after`` processes:
    the weights, losses and per-sample state of one uninterrupted process."""
    common = [
        *EXACT,
        f"out={tmp_path}",
        "epochs=0.7",
        "checkpoint_every=4",
        "objective=nuclr",
        "objective.freeze_epochs=0",
        "objective.temperature=0.2",
    ]
    train(load_config([*common, "name=one"]))
    killed = torchrun_train(
        *common, "name=cut", processes=before, environment={FAULT_VARIABLE: "8:pointer"}, succeed=False
    )
    assert killed.returncode != 0
    assert latest_checkpoint(tmp_path / "cut" / "checkpoints").name == "step-00000008"
    if after == 1:
        train(load_config([*common, "name=cut", "resume=true"]))
    else:
        torchrun_train(*common, "name=cut", "resume=true", processes=after)
    assert_same_run(tmp_path, "one", "cut")
    expected, got = sample_state(tmp_path / "one"), sample_state(tmp_path / "cut")
    for key, values in expected.items():
        torch.testing.assert_close(got[key], values, rtol=1e-5, atol=1e-6, msg=key)


def test_a_batch_the_processes_cannot_share_evenly_is_refused_on_every_process(tmp_path):
    finished = torchrun_train(*EXACT, f"out={tmp_path}", "batch_size=63", "name=odd", succeed=False)
    assert finished.returncode != 0
    message = "batch_size must be a multiple of the number of processes, 2: got 63 (accepted: 2, 4, 6, ...)"
    assert finished.stderr.count(message) == 2, finished.stderr[-3000:]
    assert not (tmp_path / "odd" / "config.yaml").exists() and not (tmp_path / "odd" / "checkpoints").exists()


@pytest.mark.slow
def test_webdataset_indices_are_owned_by_ranges_like_any_other(tmp_path):
    """Four shards of 8 samples with room for 10 each: indices s * 10 + p. Two processes each read two shards;
    after an epoch every sample read has its state row written by its owner, and the unused slots are untouched."""
    from imagefiles import write_tar
    from test_real_sets import solid

    for shard in range(4):
        members = []
        for number in range(8):
            colour = ("red", "green", "blue")[(shard + number) % 3]
            members += [(f"{number:03d}.png", solid(colour)), (f"{number:03d}.txt", f"a {colour} picture".encode())]
        write_tar(tmp_path / f"shard-{shard}.tar", members)
    torchrun_train(
        f"out={tmp_path}",
        "name=streamed",
        "progress=false",
        "probe_train_size=0",
        "pipeline=image_text",
        "dataset=webdataset",
        f"data_dir={tmp_path / 'shard-{0..3}.tar'}",
        "samples_per_shard=10",
        "steps_per_epoch=2",
        "epochs=1",
        "batch_size=32",
        "image_size=8",
        "image_encoder=mlp",
        "widths=[16]",
        "probe_layer=encoder",
        "text_width=16",
        "text_heads=2",
        "objective=nuclr",
        "objective.freeze_epochs=0",
        timeout=300,
    )
    state = sample_state(tmp_path / "streamed")
    read = torch.tensor([shard * 10 + number for shard in range(4) for number in range(8)])
    for side in "ab":
        visited = torch.nonzero(~torch.isneginf(state[f"log_u/{side}"])).flatten()
        assert torch.equal(visited, read), side
