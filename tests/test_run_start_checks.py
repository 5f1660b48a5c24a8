"""What a run refuses before it writes anything: a streamed dataset without the length of its epoch."""

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
