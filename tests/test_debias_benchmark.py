"""The debiasing benchmark on a trained run: before and after projection, from the command line."""

import json

import pytest
import torch

from uncurated.cli import main
from uncurated.data import write_idx
from uncurated.train import load_config, train


def test_debias_command_reports_every_method_on_a_trained_spurious_run(tmp_path, capsys):
    root = tmp_path / "fashion"
    root.mkdir()
    generator = torch.Generator().manual_seed(0)
    tops_and_footwear = torch.tensor([0, 2, 4, 6, 5, 7, 9])
    for split, count in (("train", 140), ("t10k", 70)):
        images = torch.randint(0, 255, (count, 28, 28), generator=generator, dtype=torch.uint8)
        images[:, :4] = 0  # a dark border, so the light-background variant differs
        labels = tops_and_footwear[torch.arange(count) % 7].to(torch.uint8)
        write_idx(root / f"{split}-images-idx3-ubyte", images.numpy())
        write_idx(root / f"{split}-labels-idx1-ubyte", labels.numpy())
    train(
        load_config(
            [
                "preset=fashion-captions",
                "dataset=fashion-spurious",
                f"data_dir={root}",
                f"out={tmp_path}",
                "name=run",
                "objective=clip",
                "progress=false",
                "widths=[8, 8]",
                "blocks=[1, 1]",
                "text_width=16",
                "text_heads=2",
                "batch_size=20",
                "epochs=1",
                "probe_train_size=40",
            ]
        )
    )
    assert main(["debias", str(tmp_path / "run")]) == 0
    out = capsys.readouterr().out
    for method in ("none", "orthogonal", "calibrated"):
        assert method in out
    report = json.loads((tmp_path / "run" / "debias.json").read_text())
    assert set(report["results"]) == {"none", "orthogonal", "calibrated"}
    for row in report["results"].values():
        assert 0.0 <= row["worst_group"] <= row["average"] <= 1.0
        assert len(row["per_group"]) == 4
        assert 0.0 <= row["max_skew_at_k"] <= 0.7
    # This fixed-seed run, like the full one, gains worst-group accuracy from projecting the background out.
    assert report["results"]["orthogonal"]["worst_group"] >= report["results"]["none"]["worst_group"]
    assert (tmp_path / "run" / "debias.png").read_bytes()[:4] == b"\x89PNG"


def test_debias_command_refuses_a_run_of_another_dataset(tmp_path, capsys):
    train(
        load_config(
            ["preset=digits", f"out={tmp_path}", "name=digits", "epochs=0.1", "progress=false", "probe_train_size=0"]
        )
    )
    with pytest.raises(SystemExit) as exit:
        main(["debias", str(tmp_path / "digits")])
    assert exit.value.code == 2
    assert "not an image-text run on dataset=fashion-spurious" in capsys.readouterr().err


def test_profession_study_removes_the_gender_direction_and_keeps_the_professions():
    from uncurated.debias.professions import profession_study

    dim = 12
    professions = torch.randn(200, dim, generator=torch.Generator().manual_seed(1))
    gender = torch.zeros(dim)
    gender[0] = 2.0
    known: dict[str, int] = {}

    def encode(prompts):
        rows = []
        for prompt in prompts:
            words = prompt.rstrip(".").split()
            name = " ".join(words[5:] if words[4] in ("male", "female") else words[4:])
            vector = professions[known.setdefault(name, len(known))].clone()
            if "male" in words:
                vector += gender
            if "female" in words:
                vector -= gender
            rows.append(vector)
        return torch.stack(rows)

    report = profession_study(encode)
    for split in ("train", "test"):
        before, after = report["splits"][split]["before"], report["splits"][split]["after"]
        assert after["pair_distance"] < 0.1 * before["pair_distance"]
        assert after["profession_accuracy"] >= before["profession_accuracy"] - 0.05


def test_professions_with_minilm_from_the_command_line(tmp_path, capsys):
    pytest.importorskip("sentence_transformers")
    assert main(["debias", "--professions", "--out", str(tmp_path)]) == 0
    report = json.loads((tmp_path / "professions.json").read_text())
    test = report["splits"]["test"]
    assert test["after"]["pair_distance"] < 0.5 * test["before"]["pair_distance"]
    assert test["after"]["profession_accuracy"] >= 0.9
