"""Progress reports: a bar on a terminal, plain short lines in a log, other libraries' bars silenced."""

from __future__ import annotations

import io
import subprocess
import sys

import pytest

from uncurated.progress import PlainProgress, is_terminal, progress, silence_third_party_progress


class FakeClock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


class FakeTerminal(io.StringIO):
    def isatty(self) -> bool:
        return True


def test_plain_progress_writes_one_line_per_interval_and_the_last_step():
    stream, clock = io.StringIO(), FakeClock()
    report = PlainProgress(100, stream=stream, interval=10.0, clock=clock)
    for step in range(1, 101):
        clock.now = step * 0.5  # 2 steps a second: 50 s in all
        report.update(step, loss=f"{5 - step / 100:.4f}", samples_per_s="256")
    report.close()
    lines = stream.getvalue().splitlines()
    # the first update, then every 10 s (every 20 steps), then the last step, once
    assert [line.split(",")[0] for line in lines] == [
        "step 1/100 (1%)",
        "step 21/100 (21%)",
        "step 41/100 (41%)",
        "step 61/100 (61%)",
        "step 81/100 (81%)",
        "step 100/100 (100%)",
    ]
    assert lines[1] == "step 21/100 (21%), loss 4.7900, samples per s 256, 2 step/s, ETA 40s"
    assert lines[-1].endswith("ETA 0s") and "\r" not in stream.getvalue()


def test_plain_progress_rate_and_eta_count_only_this_report():
    stream, clock = io.StringIO(), FakeClock()
    report = PlainProgress(1000, initial=400, unit="image", desc="embedding", stream=stream, clock=clock)
    clock.now = 300.0
    report.update(500)  # 100 images in 300 s: 3 s an image, 500 left
    assert stream.getvalue() == "embedding: image 500/1000 (50%), 3 s/image, ETA 25m00s\n"
    report.close()  # already written at this position: nothing more
    assert stream.getvalue().count("\n") == 1


def test_progress_picks_a_bar_only_on_a_terminal():
    assert not is_terminal(io.StringIO()) and is_terminal(FakeTerminal())
    assert isinstance(progress(10, stream=io.StringIO()), PlainProgress)
    terminal = FakeTerminal()
    bar = progress(10, stream=terminal)
    assert not isinstance(bar, PlainProgress)
    bar.update(5, loss="1.0")
    bar.close()
    assert "\r" in terminal.getvalue() and "5/10" in terminal.getvalue()


def test_silencing_turns_off_the_hugging_face_bars(monkeypatch):
    logging = pytest.importorskip("transformers.utils.logging")
    monkeypatch.setenv("HF_HUB_DISABLE_PROGRESS_BARS", "0")  # restored after the test
    logging.enable_progress_bar()  # an earlier test (the bench) may have silenced them
    assert logging.is_progress_bar_enabled()
    try:
        silence_third_party_progress()
        assert not logging.is_progress_bar_enabled()
        from huggingface_hub.utils import are_progress_bars_disabled

        assert are_progress_bars_disabled()
    finally:
        logging.enable_progress_bar()
        from huggingface_hub.utils import enable_progress_bars

        enable_progress_bars()


def test_a_training_run_written_to_a_log_has_short_plain_lines(tmp_path):
    """What `make demo > log` relies on: a run whose output is not a terminal prints no bar frames."""
    log = tmp_path / "log"
    with log.open("w") as out:
        result = subprocess.run(
            [
                sys.executable,
                "-m",
                "uncurated",
                "train",
                "preset=digits",
                "epochs=1",
                "train_subset=512",
                "log_every=1",
                f"out={tmp_path}",
                "name=run",
            ],
            stdout=out,
            stderr=subprocess.STDOUT,
            timeout=600,
        )
    text = log.read_text()
    assert result.returncode == 0, text
    assert "\r" not in text and max(map(len, text.splitlines())) <= 300, text
    assert "step 4/4 (100%), loss " in text
