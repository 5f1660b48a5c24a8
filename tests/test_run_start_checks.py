"""What a run refuses before it writes anything: a streamed dataset without the length of its epoch, FSDP2's
mixed-precision policy in a run of one process."""

from __future__ import annotations

import pytest
from test_train_build import write_image_text_files

from uncurated.train import ConfigError, load_config, train


def test_shards_without_steps_per_epoch_are_refused_before_the_run_folder_exists(tmp_path):
    _, _, shards = write_image_text_files(tmp_path / "data")
    config = load_config(["dataset=webdataset", f"data_dir={shards}", f"out={tmp_path / 'runs'}", "name=shards"])
    with pytest.raises(ConfigError, match=r"dataset=webdataset is streamed, .*give steps_per_epoch=N"):
        train(config)
    assert not (tmp_path / "runs").exists()


@pytest.mark.parametrize("policy", ["bf16", "bf16_reduce_fp32"])
def test_an_fsdp_policy_in_one_process_is_refused_before_the_run_folder_exists(tmp_path, policy):
    config = load_config(["preset=digits", f"fsdp_mixed_precision={policy}", f"out={tmp_path / 'runs'}", "name=one"])
    with pytest.raises(ConfigError, match=rf"fsdp_mixed_precision={policy} is FSDP2's .* runs in one process"):
        train(config)
    assert not (tmp_path / "runs").exists()
