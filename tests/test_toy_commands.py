"""The theory toys from the command line: tables printed, JSON and PNG written, bad options named."""

import json

import pytest

from uncurated.cli import main


def test_toy_dcl_writes_its_grid(tmp_path, capsys):
    out = tmp_path / "dcl"
    assert (
        main(["toy", "dcl", "--negatives", "8", "512", "--positives", "64", "--trials", "100", "--out", str(out)]) == 0
    )
    assert "slope(N)" in capsys.readouterr().out
    rows = json.loads((out / "dcl_concentration.json").read_text())["rows"]
    assert [(row["negatives"], row["positives"]) for row in rows] == [(8, 64), (512, 64)]
    assert rows[1]["error"] < rows[0]["error"]  # more negatives, a closer estimate
    assert (out / "dcl_concentration.png").read_bytes()[:4] == b"\x89PNG"


def test_toy_dcl_rejects_bad_options(capsys):
    with pytest.raises(SystemExit):
        main(["toy", "dcl", "--classes", "1"])
    assert "argument --classes: must be an integer >= 2, got 1" in capsys.readouterr().err


def test_toy_clip_margin_orders_the_objectives(tmp_path, capsys):
    out = tmp_path / "margin"
    arguments = ["--temperatures", "0.01", "0.03", "--steps", "250", "--out", str(out)]
    assert main(["toy", "clip-margin", *arguments]) == 0
    assert "clip+reg" in capsys.readouterr().out
    rows = json.loads((out / "clip_margin.json").read_text())["rows"]
    by_name = {(row["objective"], row["tau"]): row for row in rows}
    square = next(row for row in rows if row["objective"] == "square")
    assert square["zero_shot_error"] > by_name[("clip", 0.01)]["zero_shot_error"] + 0.1
    assert by_name[("clip", 0.03)]["mean_margin"] > by_name[("clip", 0.01)]["mean_margin"]
    assert (out / "clip_margin.png").read_bytes()[:4] == b"\x89PNG"


def test_toy_clip_margin_rejects_repeated_seeds(capsys):
    with pytest.raises(SystemExit):
        main(["toy", "clip-margin", "--seeds", "1", "1"])
    assert "argument --seeds: must be distinct" in capsys.readouterr().err
