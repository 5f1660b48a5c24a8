"""The theory toys from the command line: tables printed, JSON and PNG written, bad options named."""

import json

import pytest

from uncurated.cli import main


def test_toy_dcl_writes_its_grid(tmp_path, capsys):
    out = tmp_path / "dcl"
    assert main(["toy", "dcl", "--negatives", "8", "512", "--positives", "64", "--trials", "100", "--out", str(out)]) == 0
    assert "slope(N)" in capsys.readouterr().out
    rows = json.loads((out / "dcl_concentration.json").read_text())["rows"]
    assert [(row["negatives"], row["positives"]) for row in rows] == [(8, 64), (512, 64)]
    assert rows[1]["error"] < rows[0]["error"]  # more negatives, a closer estimate
    assert (out / "dcl_concentration.png").read_bytes()[:4] == b"\x89PNG"


def test_toy_dcl_rejects_bad_options(capsys):
    with pytest.raises(SystemExit):
        main(["toy", "dcl", "--classes", "1"])
    assert "argument --classes: must be an integer >= 2, got 1" in capsys.readouterr().err
