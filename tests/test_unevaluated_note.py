"""A run with nothing to evaluate on says so at its end, and how to evaluate it, instead of ending silently."""

from __future__ import annotations

from test_train_build import write_image_text_files

from uncurated.train import load_config, train


def test_a_csv_run_without_real_sets_says_it_was_not_evaluated(tmp_path, capsys):
    _, csv_path, _ = write_image_text_files(tmp_path / "data")
    files = [
        "dataset=csv",
        f"data_dir={csv_path}",
        "image_size=8",
        "batch_size=16",
        "epochs=1",
        "progress=false",
        "max_skipped_fraction=0.1",
    ]
    report = train(load_config([*files, f"out={tmp_path}", "name=blind"]))
    assert "evaluation" not in report
    error = capsys.readouterr().err
    assert (
        "note: not evaluated: dataset=csv has no test split; give zero_shot_dir=FOLDER or retrieval_file=FILE" in error
    )
    assert f"uncurated eval {tmp_path / 'blind'} --retrieval FILE" in error
