import math
import re

import pytest
from fakedata import write_fake_fashion_mnist

from uncurated import __version__
from uncurated.cli import main

NAMES = ["infonce", "siglip", "cyclip", "dcl", "hcl", "rince", "clip_reg", "sogclr", "isogclr", "nuclr"]


def run_exiting(argv, capsys):
    """Run a command line that ends in SystemExit; return (status, stdout, stderr)."""
    with pytest.raises(SystemExit) as stop:
        main(argv)
    captured = capsys.readouterr()
    return stop.value.code, captured.out, captured.err


def test_top_level_help_lists_the_commands(capsys):
    status, out, _ = run_exiting(["--help"], capsys)
    assert status == 0
    assert re.search(r"objectives\s+list every objective", out)
    assert re.search(r"demo\s+evaluate every objective", out)


@pytest.mark.parametrize(
    ("command", "expected"),
    [("objectives", ["usage: uncurated objectives"]), ("demo", ["--data-dir", "--batch-size", "--dim", "--seed"])],
)
def test_each_command_has_help(capsys, command, expected):
    status, out, _ = run_exiting([command, "--help"], capsys)
    assert status == 0
    for text in expected:
        assert text in out


def test_version(capsys):
    status, out, _ = run_exiting(["--version"], capsys)
    assert status == 0
    assert out.strip() == f"uncurated {__version__}"


def test_no_command_is_a_usage_error(capsys):
    status, _, err = run_exiting([], capsys)
    assert status == 2
    assert "required" in err


def test_objectives_lists_every_objective_with_its_parameters(capsys):
    assert main(["objectives"]) == 0
    out = capsys.readouterr().out
    listed = re.findall(r"^(\w+): ", out, flags=re.MULTILINE)
    assert listed == NAMES
    assert "tau_plus=0.1" in out and "bias=-10" in out and "temperature=0.07" in out


def test_demo_prints_a_finite_row_per_objective(tmp_path, capsys):
    write_fake_fashion_mnist(tmp_path, sizes={"test": 20})
    assert main(["demo", "--data-dir", str(tmp_path), "--batch-size", "16", "--dim", "8"]) == 0
    out = capsys.readouterr().out
    assert "batch of 16 images" in out and "to 8 dims" in out
    rows = {line.split()[0]: line for line in out.splitlines() if line.split()[:1] and line.split()[0] in NAMES}
    assert list(rows) == NAMES
    for line in rows.values():
        numbers = [float(n) for n in re.findall(r"(-?\d+\.\d{4})\*?(?:\s|$)", line)]
        assert len(numbers) == 4, line  # loss and |grad| for each pairing
        assert all(math.isfinite(n) for n in numbers)
        assert numbers[1] > 0 and numbers[3] > 0


def test_demo_without_data_exits_2_with_instructions(tmp_path, capsys):
    missing = tmp_path / "missing"
    status, out, err = run_exiting(["demo", "--data-dir", str(missing)], capsys)
    assert status == 2
    assert out == ""
    assert "sudo apt-get install dataset-fashion-mnist" in err
    assert str(missing) in err and "--data-dir" in err
    assert "Traceback" not in err


@pytest.mark.parametrize(
    ("option", "value", "message"),
    [
        ("--batch-size", "1", "argument --batch-size: must be an integer >= 2, got 1"),
        ("--batch-size", "21", "argument --batch-size: the test split has 20 images, got 21"),
        ("--dim", "0", "argument --dim: must be an integer >= 1, got 0"),
        ("--dim", "eight", "argument --dim: must be an integer >= 1, got 'eight'"),
    ],
)
def test_demo_rejects_bad_sizes(tmp_path, capsys, option, value, message):
    write_fake_fashion_mnist(tmp_path, sizes={"test": 20})
    status, _, err = run_exiting(["demo", "--data-dir", str(tmp_path), option, value], capsys)
    assert status == 2
    assert message in err


def test_train_stopped_by_a_detected_fault_exits_1_with_the_reason(tmp_path, capsys):
    # A learning rate that blows the weights up: the first non-finite step stops the run (max_nonfinite_steps=0).
    arguments = [
        "train",
        "preset=digits",
        f"out={tmp_path}",
        "progress=false",
        "epochs=1",
        "lr=1e30",
        "warmup_epochs=0",
        "max_nonfinite_steps=0",
    ]
    with pytest.raises(SystemExit) as stopped:
        main(arguments)
    assert stopped.value.code == 1
    assert "uncurated train: stopped:" in capsys.readouterr().err


def test_every_command_builds_its_options_on_a_parser_of_its_own():
    """A command's add_arguments on a parser made without the command's description (argparse's default: None)."""
    import argparse

    from uncurated.cli import COMMANDS
    from uncurated.commands import bench

    for command in COMMANDS:
        if hasattr(command, "add_arguments"):
            parser = argparse.ArgumentParser()
            command.add_arguments(parser)
            assert parser.format_help()
    parser = argparse.ArgumentParser()
    bench.add_arguments(parser)
    assert parser.description.startswith(bench.DESCRIPTION) and "quick" in parser.description


def test_eval_help_states_the_knn_defaults_the_evaluation_takes(capsys):
    from uncurated.evaluate import knn

    with pytest.raises(SystemExit):
        main(["eval", "--help"])
    text = " ".join(capsys.readouterr().out.split())
    assert f"neighbours, >= 1 (default: {knn.DEFAULT_K})" in text
    assert f"kNN vote temperature, > 0 (default: {knn.DEFAULT_TEMPERATURE})" in text


def _declared_numbers():
    from uncurated.commands import bound, demo
    from uncurated.commands.toys import clip_margin, dcl, nuclr, wpse

    commands = {"bound": bound, "demo": demo, "toy clip-margin": clip_margin, "toy dcl": dcl}
    commands |= {"toy nuclr": nuclr, "toy wpse": wpse}
    return [(command, number) for command, module in commands.items() for number in module.OPTIONS]


@pytest.mark.parametrize("command, number", _declared_numbers(), ids=lambda item: getattr(item, "flag", item))
def test_each_numeric_option_refuses_what_its_help_says_it_refuses(capsys, command, number):
    source = ["runs/none"] if command == "bound" else []
    with pytest.raises(SystemExit) as stop:
        main([*command.split(), "--help"])
    assert stop.value.code == 0
    help_text = " ".join(capsys.readouterr().out.split())
    accepted = "> 0" if number.low is None else f">= {number.low}"
    assert f"{number.what}, {accepted} (default: " in help_text
    below = "0" if number.low is None else str(number.low - 1)
    with pytest.raises(SystemExit) as stop:
        main([*command.split(), *source, number.flag, below])
    assert stop.value.code == 2
    error = capsys.readouterr().err
    assert f"argument {number.flag}: must be " in error and accepted in error
